//! Persistent writes and safe opens, in one place: atomic file replacement
//! (temporary file in the same directory, fsync, rename, fsync the
//! directory), the claim by rename that never overwrites, directory
//! creation with our modes, and (`fsio/beneath.rs`) every open of a path
//! under the root: from the root's handle, never following a symlink, never
//! blocking on a FIFO; reads of what they open are capped (`fsio/read.rs`).
//!
//! Writes go through the same walk as reads: every function here takes the
//! root first, opens the target's folder from the root's handle (a
//! symlinked component is refused, [`is_refusal`]) and creates, renames
//! and fsyncs by name within that one folder handle (`openat` with
//! `O_CREAT | O_EXCL | O_NOFOLLOW`, `renameat`), so a folder a job swaps
//! for a link to outside the root is never written through.
//!
//! Modes: files are created `0660` and folders `0770`, before the umask. No
//! bit is ever granted to "other" (prompts can hold secrets); whether the
//! group may write (operators' tools dropping prompts and ABORT markers) is
//! the umask's decision, which the service unit sets.

// The one module allowed the raw std writes that clippy.toml forbids elsewhere.
#![allow(clippy::disallowed_methods)]

use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg, OFlag, openat, renameat};
use nix::sys::stat::Mode;
use nix::unistd::{UnlinkatFlags, unlinkat};
use serde::Serialize;

use crate::error::{IoContext, IoError};

mod across;
mod batch;
mod beneath;
mod read;

pub use batch::{Batch, Deferred, batch};
pub use beneath::{
    create_dir_in, create_dirs, dir_identity, is_refusal, kind_of, open_append, open_append_len,
    open_dir, open_file, open_file_len, open_file_stat, read_dir, regular_identity,
    rename_noreplace, stat_nofollow,
};
pub use read::{read_capped, read_capped_at, read_end, read_tail};

pub const FILE_MODE: u32 = 0o660;
pub const DIR_MODE: u32 = 0o770;

/// Replace `path` under `root` with `bytes` so that readers see the old or
/// the new content, never a mix, and the new content survives a crash once
/// this returns. The folder is opened from the root's handle (a symlinked
/// folder is refused, [`is_refusal`]); the temporary file is created,
/// renamed over `path` and the folder fsynced through that one handle.
pub fn write_atomic(root: &Path, path: &Path, bytes: &[u8]) -> Result<(), IoError> {
    replace(root, path, bytes, true)
}

/// [`write_atomic`] without its fsyncs: readers see the old or the new
/// content, never a mix, but a crash of the machine may bring the old back.
/// Only for a write whose loss recovery treats as it treats its presence;
/// the next synced write in the folder makes it durable.
pub fn write_atomic_unsynced(root: &Path, path: &Path, bytes: &[u8]) -> Result<(), IoError> {
    replace(root, path, bytes, false)
}

fn replace(root: &Path, path: &Path, bytes: &[u8], synced: bool) -> Result<(), IoError> {
    let (dir, name) = beneath::open_parent(root, path)?;
    let tmp = temp_name(name);
    let tmp_path = path.with_file_name(&tmp);
    let result = create_in(&dir, &tmp, &tmp_path, bytes, synced)
        .and_then(|()| renameat(&dir, tmp.as_os_str(), &dir, name).ctx("renaming into place", path))
        .and_then(|()| if synced { sync_dir(&dir, path) } else { Ok(()) });
    if result.is_err() {
        let _ = unlinkat(&dir, tmp.as_os_str(), UnlinkatFlags::NoRemoveDir);
    }
    result
}

/// [`write_atomic`] of a value as pretty JSON with a trailing newline.
pub fn write_json_atomic<T: Serialize>(root: &Path, path: &Path, value: &T) -> Result<(), IoError> {
    write_atomic(root, path, &json_bytes(path, value)?)
}

/// [`write_atomic_unsynced`] of a value as pretty JSON with a trailing newline.
pub fn write_json_atomic_unsynced<T: Serialize>(
    root: &Path,
    path: &Path,
    value: &T,
) -> Result<(), IoError> {
    write_atomic_unsynced(root, path, &json_bytes(path, value)?)
}

fn json_bytes<T: Serialize>(path: &Path, value: &T) -> Result<Vec<u8>, IoError> {
    let mut bytes = serde_json::to_vec_pretty(value)
        .map_err(|e| IoError::new("serialising", path, io::Error::other(e)))?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Remove the file `path` under `root` and fsync its folder, so the
/// removal survives a crash. Its folder is opened as in [`write_atomic`];
/// a symlink at `path` itself is removed, never followed. `false` when
/// there was nothing to remove (no such file, or no such folder).
pub fn remove_file(root: &Path, path: &Path) -> Result<bool, IoError> {
    let (dir, name) = match beneath::open_parent(root, path) {
        Ok(opened) => opened,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    match unlinkat(&dir, name, UnlinkatFlags::NoRemoveDir) {
        Ok(()) => sync_dir(&dir, path).map(|()| true),
        Err(Errno::ENOENT) => Ok(false),
        Err(e) => Err(IoError::new("removing", path, e.into())),
    }
}

/// Does nobody have the regular file `path` under `root` open for writing?
/// Told by a read lease (`F_SETLEASE`), which the kernel grants only when
/// no process has the file open for writing, and only on a file this
/// process owns: `None` when that cannot be told (another owner, leases
/// disabled, no such file). The lease is released at once.
pub fn has_no_writer(root: &Path, path: &Path) -> Option<bool> {
    use std::os::fd::AsRawFd;
    let file = open_file(root, path).ok()?;
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own, with integer arguments.
    let taken = unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_RDLCK) };
    if taken == 0 {
        // SAFETY: as above.
        unsafe { libc::fcntl(fd, libc::F_SETLEASE, libc::F_UNLCK) };
        return Some(true);
    }
    match Errno::last() {
        Errno::EAGAIN => Some(false),
        _ => None,
    }
}

/// Create a new file under `root` with `bytes`, fsynced, failing if any
/// file (a symlink included) has that name. Its folder is opened as in
/// [`write_atomic`].
pub fn create_new_synced(root: &Path, path: &Path, bytes: &[u8]) -> Result<(), IoError> {
    let (dir, name) = beneath::open_parent(root, path)?;
    create_in(&dir, name, path, bytes, true)
}

/// Give the new name `to` under `root` the file at `from` (also under
/// `root`): a hard link to it when the filesystem makes one and the file
/// linked is still the one `expect` names (device and inode), else a copy
/// of `bytes`, what was read of it. Neither is fsynced (the folder's next
/// sync makes it durable); a file already at `to` is an error, never
/// replaced. `true` when it is a link.
pub fn link_or_copy(
    root: &Path,
    from: &Path,
    to: &Path,
    expect: (u64, u64),
    bytes: &[u8],
) -> Result<bool, IoError> {
    use nix::fcntl::AtFlags;
    let (src, from_name) = beneath::open_parent(root, from)?;
    let (dst, to_name) = beneath::open_parent(root, to)?;
    if nix::unistd::linkat(&src, from_name, &dst, to_name, AtFlags::empty()).is_ok() {
        let linked = nix::sys::stat::fstatat(&dst, to_name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .map(|st| (st.st_dev, st.st_ino));
        if linked == Ok(expect) {
            return Ok(true);
        }
        // Replaced between the read and the link: what was read is copied.
        unlinkat(&dst, to_name, UnlinkatFlags::NoRemoveDir).ctx("removing", to)?;
    }
    create_in(&dst, to_name, to, bytes, false)?;
    Ok(false)
}

/// [`create_new_synced`] without the fsync: made durable by the next sync
/// of its folder (or never, for a file recovery can do without).
pub fn create_new_unsynced(root: &Path, path: &Path, bytes: &[u8]) -> Result<(), IoError> {
    let (dir, name) = beneath::open_parent(root, path)?;
    create_in(&dir, name, path, bytes, false)
}

/// Create `path` under `root` with `bytes` atomically (readers see all of
/// it or no file), fsynced, unless a file of that name exists: then
/// nothing is written and `false` is returned. Never replaces anything.
pub fn create_new_atomic(root: &Path, path: &Path, bytes: &[u8]) -> Result<bool, IoError> {
    create_new_atomic_mode(root, path, bytes, FILE_MODE)
}

/// [`create_new_atomic`] of a file only its owner may read (a secret):
/// mode 0600 from its creation on.
pub fn create_new_private(root: &Path, path: &Path, bytes: &[u8]) -> Result<bool, IoError> {
    create_new_atomic_mode(root, path, bytes, 0o600)
}

fn create_new_atomic_mode(
    root: &Path,
    path: &Path,
    bytes: &[u8],
    mode: u32,
) -> Result<bool, IoError> {
    let (dir, name) = beneath::open_parent(root, path)?;
    let tmp = temp_name(name);
    let tmp_path = path.with_file_name(&tmp);
    create_in_mode(&dir, &tmp, &tmp_path, bytes, true, mode)?;
    let placed = beneath::rename_noreplace_at((&dir, &tmp, &tmp_path), (&dir, name, path));
    if !matches!(placed, Ok(Renamed::Done)) {
        let _ = unlinkat(&dir, tmp.as_os_str(), UnlinkatFlags::NoRemoveDir);
    }
    match placed? {
        Renamed::Done => Ok(true),
        Renamed::TargetExists => Ok(false),
        Renamed::SourceGone => Err(IoError::new(
            "creating",
            path,
            io::Error::other(format!(
                "its temporary file {} vanished",
                tmp_path.display()
            )),
        )),
    }
}

/// Create `name` in the folder handle `dir` (`O_CREAT | O_EXCL |
/// O_NOFOLLOW`), write `bytes` and fsync it. `path` names it in errors.
fn create_in(
    dir: &File,
    name: &OsStr,
    path: &Path,
    bytes: &[u8],
    synced: bool,
) -> Result<(), IoError> {
    create_in_mode(dir, name, path, bytes, synced, FILE_MODE)
}

fn create_in_mode(
    dir: &File,
    name: &OsStr,
    path: &Path,
    bytes: &[u8],
    synced: bool,
    mode: u32,
) -> Result<(), IoError> {
    let flags = OFlag::O_WRONLY
        | OFlag::O_CREAT
        | OFlag::O_EXCL
        | OFlag::O_NOFOLLOW
        | OFlag::O_CLOEXEC
        | OFlag::O_NOCTTY;
    let fd = openat(dir, name, flags, Mode::from_bits_truncate(mode))
        .map_err(|e| IoError::new("creating", path, e.into()))?;
    let mut f = File::from(fd);
    f.write_all(bytes).ctx("writing", path)?;
    if !synced {
        return Ok(());
    }
    batch::sync(&f, "syncing", path)
}

/// A temporary name beside `name`, ignored by every reader (a dotfile
/// ending in `.tmp`), unique to this process and call, and to the host:
/// an inbox shared by several hosts is written by processes that may
/// share a pid. The process's part is made once (a process writes its
/// files from its own program, never from a child forked without `exec`).
pub(super) fn temp_name(name: &OsStr) -> OsString {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    static OURS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let ours = OURS.get_or_init(|| {
        let unique = uuid::Uuid::now_v7().simple().to_string();
        format!("{}.{}", std::process::id(), &unique[unique.len() - 8..])
    });
    let name = name.to_string_lossy();
    OsString::from(format!(".{name}.{ours}.{n}.tmp"))
}

/// fsync the folder holding `path` under `root` (opened as in
/// [`write_atomic`]), so a rename or create in it is durable.
pub fn sync_parent(root: &Path, path: &Path) -> Result<(), IoError> {
    let (dir, _) = beneath::open_parent(root, path)?;
    sync_dir(&dir, path)
}

/// fsync the file at `path` under `root` (opened as in [`open_file`]), or
/// owe it to the open batch: for a file another process wrote and this one
/// vouches for before acting on it.
pub fn sync_file(root: &Path, path: &Path) -> Result<(), IoError> {
    let file = beneath::open_file(root, path)?;
    batch::sync(&file, "syncing file", path)
}

/// fsync a file this process has open and wrote to (an append-only
/// journal), or owe it to the open batch. `path` names it in errors.
pub fn sync_open(file: &File, path: &Path) -> Result<(), IoError> {
    batch::sync(file, "syncing", path)
}

/// fsync a folder this process holds open (`path` names it), or owe it
/// to the open batch: what was made or renamed in it is durable.
pub fn sync_held_dir(dir: &File, path: &Path) -> Result<(), IoError> {
    batch::sync(dir, "syncing directory", path)
}

/// Reserve `len` bytes of room past the end of `file` (at `path`) without
/// changing its length (`fallocate`, `FALLOC_FL_KEEP_SIZE`): appends up to
/// that much then never meet a full disk. `end` is where the file ends if
/// the caller knows (else it is asked). False when the filesystem
/// reserves nothing (it does not support it); a full disk is the error.
pub fn reserve(file: &File, path: &Path, end: Option<u64>, len: u64) -> Result<bool, IoError> {
    use nix::fcntl::{FallocateFlags, fallocate};
    let end = match end {
        Some(end) => end,
        None => file.metadata().ctx("reserving room in", path)?.len(),
    };
    let (Ok(offset), Ok(len)) = (i64::try_from(end), i64::try_from(len)) else {
        return Ok(false);
    };
    match fallocate(file, FallocateFlags::FALLOC_FL_KEEP_SIZE, offset, len) {
        Ok(()) => Ok(true),
        Err(Errno::EOPNOTSUPP | Errno::ENOSYS) => Ok(false),
        Err(e) => Err(IoError::new("reserving room in", path, e.into())),
    }
}

/// fsync the folder handle `dir`, which holds `path`.
fn sync_dir(dir: &File, path: &Path) -> Result<(), IoError> {
    let folder = path.parent().unwrap_or(path);
    batch::sync(dir, "syncing directory", folder)
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
    batch::sync(&handle, "syncing directory", parent)
}

/// Take an exclusive `flock` on `path` under `root` (created if missing)
/// without waiting. `None` means another process holds it. The file is
/// opened from the root's handle, never through a symlink, and must be a
/// regular file. The lock lasts as long as the returned handle (or the
/// process); the descriptor is close-on-exec, so children never inherit it.
pub fn try_lock(root: &Path, path: &Path) -> Result<Option<Flock<File>>, IoError> {
    lock_now(beneath::open_lock_file(root, path)?, path)
}

/// [`try_lock`] on the folder `dir` under `root` (never created here; a
/// symlink or a file there is refused): the lock a job's monitor holds on
/// its run folder.
pub fn try_lock_dir(root: &Path, dir: &Path) -> Result<Option<Flock<File>>, IoError> {
    lock_now(beneath::open_dir(root, dir)?, dir)
}

/// An exclusive `flock` on `file` (opened at `path`) without waiting;
/// `None` when another process holds it.
fn lock_now(file: File, path: &Path) -> Result<Option<Flock<File>>, IoError> {
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(Some(lock)),
        Err((_, Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(IoError::new("locking", path, e.into())),
    }
}

/// Take an exclusive `flock` on `path` under `root` (created if missing,
/// opened as in [`try_lock`]), waiting for whoever holds it. Released when
/// the handle is dropped (or the process ends).
pub fn lock_wait(root: &Path, path: &Path) -> Result<Flock<File>, IoError> {
    let mut file = beneath::open_lock_file(root, path)?;
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
    fn a_file_open_for_writing_has_a_writer_until_closed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("x.prompt.md");
        let writer = File::create(&p).expect("create");
        assert_eq!(has_no_writer(dir.path(), &p), Some(false));
        drop(writer);
        assert_eq!(has_no_writer(dir.path(), &p), Some(true));
        assert_eq!(has_no_writer(dir.path(), &dir.path().join("gone")), None);
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("job.json");
        write_atomic(dir.path(), &p, b"one").expect("first");
        write_atomic(dir.path(), &p, b"two").expect("second");
        assert_eq!(fs::read(&p).expect("read"), b"two");
        let names: Vec<_> = fs::read_dir(dir.path()).expect("ls").collect();
        assert_eq!(names.len(), 1, "temporary files left behind");
    }

    #[test]
    fn writes_never_go_through_a_symlinked_folder() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("root");
        let outside = dir.path().join("outside");
        fs::create_dir_all(root.join("runs")).expect("runs");
        fs::create_dir_all(&outside).expect("outside");
        std::os::unix::fs::symlink(&outside, root.join("runs/a")).expect("link");
        let at = root.join("runs/a/job.json");
        let refused = [
            write_atomic(&root, &at, b"x").expect_err("atomic"),
            create_new_synced(&root, &at, b"x").expect_err("new"),
            create_new_atomic(&root, &at, b"x").expect_err("new atomic"),
            try_lock(&root, &root.join("runs/a/x.lock")).expect_err("lock"),
            lock_wait(&root, &root.join("runs/a/x.lock")).expect_err("lock"),
        ];
        for e in refused {
            assert!(is_refusal(&e), "{e}");
            let msg = e.to_string();
            let named = msg.contains("runs/a") && msg.contains("is a symlink");
            assert!(named, "names the folder: {msg}");
        }
        let written: Vec<_> = fs::read_dir(&outside).expect("ls").collect();
        assert!(written.is_empty(), "written outside: {written:?}");
    }

    #[test]
    fn a_symlink_in_place_of_the_file_is_replaced_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("target");
        fs::write(&target, "keep").expect("target");
        let p = dir.path().join("job.json");
        std::os::unix::fs::symlink(&target, &p).expect("link");
        assert!(!create_new_atomic(dir.path(), &p, b"new").expect("exists"));
        write_atomic(dir.path(), &p, b"new").expect("replace");
        assert_eq!(fs::read(&target).expect("read"), b"keep");
        assert_eq!(fs::read(&p).expect("read"), b"new");
        let e = try_lock(dir.path(), &target.with_file_name("job.json")).expect("a file now");
        assert!(e.is_some());
    }
}
