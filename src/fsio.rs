//! Persistent writes, in one place: atomic file replacement (temporary file
//! in the same directory, fsync, rename, fsync the directory), the claim by
//! rename that never overwrites, and directory creation with our modes.
//!
//! Modes: files are created `0660` and folders `0770`, before the umask. No
//! bit is ever granted to "other" (prompts can hold secrets); whether the
//! group may write (operators' tools dropping prompts and ABORT markers) is
//! the umask's decision, which the service unit sets.

// The one module allowed the raw std writes that clippy.toml forbids elsewhere.
#![allow(clippy::disallowed_methods)]

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, Flock, FlockArg, RenameFlags, renameat2};
use serde::Serialize;

use crate::error::{IoContext, IoError};

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
    let placed = rename_noreplace(&tmp, path);
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

/// Rename `from` to `to` atomically without ever replacing an existing `to`
/// (`renameat2(RENAME_NOREPLACE)`), then fsync the directories involved.
pub fn rename_noreplace(from: &Path, to: &Path) -> Result<Renamed, IoError> {
    match renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_NOREPLACE) {
        Ok(()) => {}
        Err(Errno::ENOENT) if fs::symlink_metadata(from).is_err() => {
            return Ok(Renamed::SourceGone);
        }
        Err(Errno::EEXIST) => return Ok(Renamed::TargetExists),
        // No fallback: link-then-unlink could delete a prompt renamed in
        // between. A filesystem without RENAME_NOREPLACE is refused loudly.
        Err(e @ (Errno::EINVAL | Errno::ENOSYS)) => {
            let msg = format!(
                "{e}: this filesystem does not support renameat2(RENAME_NOREPLACE); put the root on ext4, xfs, btrfs or tmpfs"
            );
            return Err(IoError::new("renaming", from, io::Error::other(msg)));
        }
        Err(e) => {
            return Err(with_target(
                IoError::new("renaming", from, io::Error::from(e)),
                to,
            ));
        }
    }
    sync_parent(to)?;
    if from.parent() != to.parent() {
        sync_parent(from)?;
    }
    Ok(Renamed::Done)
}

fn with_target(mut e: IoError, to: &Path) -> IoError {
    e.source = io::Error::new(
        e.source.kind(),
        format!("{} (to {})", e.source, to.display()),
    );
    e
}

/// Create `dir` and its missing parents with [`DIR_MODE`].
pub fn create_dirs(dir: &Path) -> Result<(), IoError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)
        .ctx("creating directory", dir)
}

/// Create `dir`, failing if it already exists; fsync its parent.
pub fn create_dir_new(dir: &Path) -> Result<(), IoError> {
    fs::DirBuilder::new()
        .mode(DIR_MODE)
        .create(dir)
        .ctx("creating directory", dir)?;
    sync_parent(dir)
}

/// Open a file for reading and appending (created if missing) with [`FILE_MODE`].
pub fn open_append(path: &Path) -> Result<File, IoError> {
    OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .ctx("opening for append", path)
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

/// Read at most `limit` bytes of a regular file, never following a symlink
/// at `path` and never blocking on a FIFO or device (those are refused).
/// Returns the bytes and whether the file was longer than `limit`.
pub fn read_capped_nofollow(path: &Path, limit: u64) -> Result<(Vec<u8>, bool), IoError> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .ctx("opening", path)?;
    if !f.metadata().ctx("inspecting", path)?.is_file() {
        let e = io::Error::other("not a regular file");
        return Err(IoError::new("reading", path, e));
    }
    let mut bytes = Vec::new();
    f.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .ctx("reading", path)?;
    let over = bytes.len() as u64 > limit;
    bytes.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    Ok((bytes, over))
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

    #[test]
    fn rename_noreplace_never_overwrites_and_reports_lost_race() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        fs::write(&a, "A").expect("write a");
        fs::write(&b, "B").expect("write b");
        assert_eq!(
            rename_noreplace(&a, &b).expect("rename"),
            Renamed::TargetExists
        );
        assert_eq!(fs::read(&b).expect("read b"), b"B");
        fs::remove_file(&b).expect("rm b");
        assert_eq!(rename_noreplace(&a, &b).expect("rename"), Renamed::Done);
        assert_eq!(
            rename_noreplace(&a, &b).expect("rename"),
            Renamed::SourceGone
        );
    }

    #[test]
    fn capped_read_refuses_symlinks_and_flags_oversize() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("f");
        fs::write(&f, "0123456789").expect("write");
        assert_eq!(
            read_capped_nofollow(&f, 4).expect("read"),
            (b"0123".to_vec(), true)
        );
        assert!(!read_capped_nofollow(&f, 10).expect("read").1);
        let l = dir.path().join("l");
        std::os::unix::fs::symlink(&f, &l).expect("symlink");
        assert!(read_capped_nofollow(&l, 100).is_err());
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        assert!(
            read_capped_nofollow(&fifo, 100).is_err(),
            "a FIFO is refused, not waited on"
        );
    }
}
