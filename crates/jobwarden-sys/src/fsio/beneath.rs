//! Safe opens under the root (DESIGN §13, "trust nothing under the root").
//!
//! Anything under the root may have been written by a careless or hostile
//! job running with our uid: symlinks, FIFOs, devices, folders swapped or
//! deleted under us. So every path under the root is opened here, and only
//! here, one component at a time from the root's directory handle
//! (`openat` with `O_NOFOLLOW | O_CLOEXEC`): a symlink anywhere below the
//! root is refused, never followed. Files are opened `O_NONBLOCK`, so a
//! FIFO or a device never blocks the open, and checked with `fstat` after
//! the open: anything but the expected type (regular file or folder) is
//! refused with an error naming the path and what was found there. Reads
//! are capped by the caller's limit.
//!
//! The root itself is the operator's choice and is trusted (it may be a
//! symlink); only what lies below it is not.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path};

use nix::errno::Errno;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use nix::fcntl::{AtFlags, OFlag, OpenHow, RenameFlags, ResolveFlag, openat, openat2, renameat2};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat, mkdirat};

use super::{DIR_MODE, FILE_MODE, Renamed};
use crate::error::IoError;

/// What a caller expects to find at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    File,
    Dir,
}

impl Expect {
    fn noun(self) -> &'static str {
        match self {
            Expect::File => "a regular file",
            Expect::Dir => "a folder",
        }
    }

    fn matches(self, st: &FileStat) -> bool {
        let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
        match self {
            Expect::File => kind == SFlag::S_IFREG,
            Expect::Dir => kind == SFlag::S_IFDIR,
        }
    }
}

/// Open a regular file under `root` for reading (see the module doc).
pub fn open_file(root: &Path, path: &Path) -> Result<File, IoError> {
    open_leaf(root, path, Expect::File, OFlag::O_RDONLY).map(File::from)
}

/// Open a folder under `root` (a handle for `openat`, `fsync`, `fstat`).
pub fn open_dir(root: &Path, path: &Path) -> Result<File, IoError> {
    open_leaf(root, path, Expect::Dir, OFlag::O_RDONLY).map(File::from)
}

/// List a folder under `root`, opened as above: entries are read through
/// the folder's handle (`/proc/self/fd`), so a folder swapped for a symlink
/// after the check is never listed. Build entry paths as `dir.join(name)`:
/// an entry's own `path()` names the handle. Entries' `metadata()` does
/// not follow symlinks.
pub fn read_dir(root: &Path, dir: &Path) -> Result<std::fs::ReadDir, IoError> {
    use std::os::fd::AsRawFd;
    let handle = open_dir(root, dir)?;
    let via = format!("/proc/self/fd/{}", handle.as_raw_fd());
    // Without /proc, the checked path is listed instead: the claim itself
    // still goes through handles, so nothing outside is ever claimed.
    std::fs::read_dir(&via)
        .or_else(|_| std::fs::read_dir(dir))
        .map_err(|e| IoError::new("listing", dir, e))
}

/// Device and inode of a folder under `root` (opened as above).
pub fn dir_identity(root: &Path, dir: &Path) -> Result<(u64, u64), IoError> {
    use std::os::unix::fs::MetadataExt;
    let meta = open_dir(root, dir)?
        .metadata()
        .map_err(|e| IoError::new("inspecting", dir, e))?;
    Ok((meta.dev(), meta.ino()))
}

/// What is at `path` under `root`, without following a symlink and
/// without opening it (`fstatat(AT_SYMLINK_NOFOLLOW)` in its folder,
/// opened as above): `None` when nothing is there. Opening nothing, it
/// never blocks on a FIFO, and never drops the `fcntl` locks this process
/// holds on the file (closing any descriptor of a file drops them all),
/// so it may look at a database another connection of ours has open.
pub fn stat_nofollow(root: &Path, path: &Path) -> Result<Option<FileStat>, IoError> {
    let (dir, name) = split_parent(path)?;
    let handle = match open_dir(root, dir) {
        Ok(handle) => handle,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    match fstatat(&handle, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::ENOENT) => Ok(None),
        Err(e) => Err(IoError::new("inspecting", path, e.into())),
    }
}

/// [`stat_nofollow`] of what must be a regular file if it is there: its
/// device and inode, `None` when missing; anything else (a symlink, a
/// FIFO, a folder) is refused ([`is_refusal`]), naming the path and what
/// was found.
pub fn regular_identity(root: &Path, path: &Path) -> Result<Option<(u64, u64)>, IoError> {
    match stat_nofollow(root, path)? {
        None => Ok(None),
        Some(st) if Expect::File.matches(&st) => Ok(Some((st.st_dev, st.st_ino))),
        Some(st) => Err(refused_stat(path, path, &st, Expect::File)),
    }
}

/// Open a regular file under `root` for reading and appending, creating it
/// with [`FILE_MODE`] if missing. Its folders must exist.
pub fn open_append(root: &Path, path: &Path) -> Result<File, IoError> {
    open_append_len(root, path).map(|(file, _)| file)
}

/// [`open_append`], and the file's length as its open found it (zero for
/// a file it made).
pub fn open_append_len(root: &Path, path: &Path) -> Result<(File, u64), IoError> {
    let flags = OFlag::O_RDWR | OFlag::O_APPEND | OFlag::O_CREAT;
    let (fd, st) = open_leaf_stat(root, path, Expect::File, flags)?;
    Ok((File::from(fd), u64::try_from(st.st_size).unwrap_or(0)))
}

/// [`open_file`], and the file's length as its open found it.
pub fn open_file_len(root: &Path, path: &Path) -> Result<(File, u64), IoError> {
    let (file, st) = open_file_stat(root, path)?;
    Ok((file, u64::try_from(st.st_size).unwrap_or(0)))
}

/// [`open_file`], and what its open found of the file (`fstat`).
pub fn open_file_stat(root: &Path, path: &Path) -> Result<(File, FileStat), IoError> {
    let (fd, st) = open_leaf_stat(root, path, Expect::File, OFlag::O_RDONLY)?;
    Ok((File::from(fd), st))
}

/// Create `dir` and its missing parents under `root` with [`DIR_MODE`],
/// one component at a time, refusing any component that is a symlink or
/// not a folder.
pub fn create_dirs(root: &Path, dir: &Path) -> Result<(), IoError> {
    let (root_fd, parts) = walk_start(root, dir)?;
    // Most often the folder is there already: one open says so.
    if let Some(Ok(_)) = open_resolved(root_fd.as_fd(), &parts, Expect::Dir, OFlag::O_RDONLY, dir) {
        return Ok(());
    }
    // Next most often only the last is missing: made in its parent, opened
    // once the same way. Anything else (a parent missing, the name taken
    // meanwhile) is left to the walk, which says what is there.
    if let Some((last, parents)) = parts.split_last() {
        let parent = component_path(root, parents);
        if let Some(Ok((at, _))) = open_resolved(
            root_fd.as_fd(),
            parents,
            Expect::Dir,
            OFlag::O_RDONLY,
            &parent,
        ) {
            match mkdirat(at.as_fd(), *last, Mode::from_bits_truncate(DIR_MODE)) {
                Ok(()) => return Ok(()),
                Err(Errno::EEXIST) => {}
                Err(e) => return Err(IoError::new("creating directory", dir, e.into())),
            }
        }
    }
    let mut cur = root_fd
        .try_clone()
        .map_err(|e| IoError::new("opening root folder", root, e))?;
    for (i, part) in parts.iter().enumerate() {
        let at = component_path(root, &parts[..=i]);
        cur = match open_at(cur.as_fd(), part, Expect::Dir, OFlag::O_RDONLY, dir, &at) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                match mkdirat(cur.as_fd(), *part, Mode::from_bits_truncate(DIR_MODE)) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(IoError::new("creating directory", &at, e.into())),
                }
                open_at(cur.as_fd(), part, Expect::Dir, OFlag::O_RDONLY, dir, &at)?.0
            }
            other => other?.0,
        };
    }
    Ok(())
}

/// Create the folder `name` in the folder `dir` holds open (`path` is
/// where that is under `root`): one `mkdirat`. One already there is
/// checked by [`create_dirs`] from the root: a folder, never a link.
pub fn create_dir_in(root: &Path, dir: &File, name: &OsStr, path: &Path) -> Result<(), IoError> {
    match mkdirat(dir.as_fd(), name, Mode::from_bits_truncate(DIR_MODE)) {
        Ok(()) => Ok(()),
        Err(Errno::EEXIST) => create_dirs(root, path),
        Err(e) => Err(IoError::new("creating directory", path, e.into())),
    }
}

/// Rename `from` to `to`, both under `root`, without ever replacing an
/// existing `to` (`renameat2(RENAME_NOREPLACE)`), through handles on both
/// folders opened as above: a symlinked folder on either side is refused,
/// so nothing is ever moved through a link to outside the root. Both
/// folders are fsynced after.
pub fn rename_noreplace(root: &Path, from: &Path, to: &Path) -> Result<Renamed, IoError> {
    let (from_dir, from_name) = split_parent(from)?;
    let (to_dir, to_name) = split_parent(to)?;
    let src = match open_dir(root, from_dir) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Renamed::SourceGone),
        Err(e) => return Err(e),
    };
    // A rename within one folder (a claim) opens it once.
    let other;
    let dst = if to_dir == from_dir {
        &src
    } else {
        other = open_dir(root, to_dir)?;
        &other
    };
    let renamed = rename_noreplace_at((&src, from_name, from), (dst, to_name, to))?;
    if renamed == Renamed::Done && from_dir != to_dir {
        super::batch::sync(&src, "syncing directory", from_dir)?;
    }
    Ok(renamed)
}

/// One name in a folder handle, and the path it stands for (in errors).
pub(super) type At<'a> = (&'a File, &'a OsStr, &'a Path);

/// `renameat2(RENAME_NOREPLACE)` between two folder handles; the target's
/// folder is fsynced after a rename.
pub(super) fn rename_noreplace_at(from: At<'_>, to: At<'_>) -> Result<Renamed, IoError> {
    let (src, from_name, from_path) = from;
    let (dst, to_name, to_path) = to;
    match renameat2(src, from_name, dst, to_name, RenameFlags::RENAME_NOREPLACE) {
        Ok(()) => {}
        Err(Errno::ENOENT) if fstatat(src, from_name, AtFlags::AT_SYMLINK_NOFOLLOW).is_err() => {
            return Ok(Renamed::SourceGone);
        }
        Err(Errno::EEXIST) => return Ok(Renamed::TargetExists),
        // Another filesystem (an inbox shared by several hosts): a copy.
        Err(Errno::EXDEV) => {
            return super::across::move_across(
                (src, from_name, from_path),
                (dst, to_name, to_path),
            );
        }
        // No fallback: link-then-unlink could delete a prompt renamed in
        // between. A filesystem without RENAME_NOREPLACE is refused loudly.
        Err(e @ (Errno::EINVAL | Errno::ENOSYS)) => {
            let msg = format!(
                "{e}: this filesystem does not support renameat2(RENAME_NOREPLACE); put the root on ext4, xfs, btrfs or tmpfs"
            );
            return Err(IoError::new("renaming", from_path, io::Error::other(msg)));
        }
        Err(e) => {
            let msg = format!("{e} (to {})", to_path.display());
            return Err(IoError::new(
                "renaming",
                from_path,
                io::Error::new(io::Error::from(e).kind(), msg),
            ));
        }
    }
    let to_dir = to_path.parent().unwrap_or(to_path);
    super::batch::sync(dst, "syncing directory", to_dir)?;
    Ok(Renamed::Done)
}

/// The folder holding `path` under `root`, opened as above (a symlinked
/// component refused), and the name of `path` in it: where every write
/// creates, replaces and fsyncs, so that nothing is written through a link.
pub(super) fn open_parent<'p>(root: &Path, path: &'p Path) -> Result<(File, &'p OsStr), IoError> {
    let (dir, name) = split_parent(path)?;
    Ok((open_dir(root, dir)?, name))
}

/// Open a regular file under `root` for reading and writing, creating it
/// with [`FILE_MODE`] if missing, never truncating it: a lock file.
pub(super) fn open_lock_file(root: &Path, path: &Path) -> Result<File, IoError> {
    open_leaf(root, path, Expect::File, OFlag::O_RDWR | OFlag::O_CREAT).map(File::from)
}

/// Is this error a refusal by the safe open (a symlink, a FIFO, a device,
/// a file where a folder was expected), as opposed to a missing file or an
/// I/O failure?
pub fn is_refusal(e: &IoError) -> bool {
    e.source
        .get_ref()
        .is_some_and(|inner| inner.is::<Refused>())
}

/// The error inside an [`IoError`] for a path refused by type.
#[derive(Debug, thiserror::Error)]
#[error("{what}")]
struct Refused {
    what: String,
}

fn split_parent(path: &Path) -> Result<(&Path, &OsStr), IoError> {
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => Ok((dir, name)),
        _ => Err(IoError::new(
            "opening the folder of",
            path,
            io::Error::new(io::ErrorKind::InvalidInput, "has no parent folder"),
        )),
    }
}

/// Open the last component of `path` as `expect` below `root`: in one
/// `openat2` that refuses every symlink, and, when that finds something
/// wrong on the way, by walking from `root` one component at a time, which
/// names what is wrong and where.
fn open_leaf(root: &Path, path: &Path, expect: Expect, flags: OFlag) -> Result<OwnedFd, IoError> {
    open_leaf_stat(root, path, expect, flags).map(|(fd, _)| fd)
}

/// [`open_leaf`], with what the open's own check found there (its size,
/// its identity): no second `fstat` for a caller that needs them.
fn open_leaf_stat(
    root: &Path,
    path: &Path,
    expect: Expect,
    flags: OFlag,
) -> Result<(OwnedFd, FileStat), IoError> {
    let (root_fd, parts) = walk_start(root, path)?;
    if let Some(opened) = open_resolved(root_fd.as_fd(), &parts, expect, flags, path) {
        return opened;
    }
    let mut cur = root_fd
        .try_clone()
        .map_err(|e| IoError::new("opening root folder", root, e))?;
    let Some((last, dirs)) = parts.split_last() else {
        return if expect == Expect::Dir {
            let st = fstat(&cur).map_err(|e| IoError::new("inspecting", root, e.into()))?;
            Ok((cur, st))
        } else {
            Err(refused(
                path,
                root,
                "is the root folder, not a regular file",
            ))
        };
    };
    for (i, part) in dirs.iter().enumerate() {
        let at = component_path(root, &parts[..=i]);
        cur = open_at(cur.as_fd(), part, Expect::Dir, OFlag::O_RDONLY, path, &at)?.0;
    }
    open_at(cur.as_fd(), last, expect, flags, path, path)
}

/// Is `openat2` known to be missing (a kernel before 5.6, or a sandbox
/// that refuses it)? Then every open walks.
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// `parts` below `dir` opened in one `openat2` that follows no symlink
/// (`RESOLVE_NO_SYMLINKS`) and leaves no folder (`RESOLVE_BENEATH`), then
/// checked with `fstat`. `None` when the walk must tell what is wrong: a
/// symlink, something not a folder, a FIFO or device on the way, or no
/// `openat2` at all (or one a sandbox refuses).
fn open_resolved(
    dir: BorrowedFd<'_>,
    parts: &[&OsStr],
    expect: Expect,
    flags: OFlag,
    full: &Path,
) -> Option<Result<(OwnedFd, FileStat), IoError>> {
    if parts.is_empty() || NO_OPENAT2.load(Ordering::Relaxed) {
        return None;
    }
    let rel: std::path::PathBuf = parts.iter().collect();
    let mut how = OpenHow::new()
        .flags(leaf_flags(flags, expect))
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_BENEATH);
    if flags.contains(OFlag::O_CREAT) {
        // The mode must be zero unless the open may create.
        how = how.mode(Mode::from_bits_truncate(FILE_MODE));
    }
    let fd = match openat2(dir, rel.as_path(), how) {
        Ok(fd) => fd,
        Err(Errno::ENOSYS | Errno::E2BIG) => {
            NO_OPENAT2.store(true, Ordering::Relaxed);
            return None;
        }
        Err(
            Errno::ELOOP
            | Errno::ENOTDIR
            | Errno::ENXIO
            | Errno::EWOULDBLOCK
            | Errno::EXDEV
            | Errno::EINVAL
            | Errno::EPERM,
        ) => return None,
        Err(e) => return Some(Err(IoError::new("opening", full, e.into()))),
    };
    Some(match fstat(&fd) {
        Ok(st) if expect.matches(&st) => Ok((fd, st)),
        Ok(st) => Err(refused_stat(full, full, &st, expect)),
        Err(e) => Err(IoError::new("inspecting", full, e.into())),
    })
}

/// The flags every open under the root adds to the caller's: no link
/// followed, no descriptor leaked to a job, no wait on a FIFO, no
/// terminal taken.
fn leaf_flags(flags: OFlag, expect: Expect) -> OFlag {
    let flags = flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
    match expect {
        Expect::Dir => flags | OFlag::O_DIRECTORY,
        Expect::File => flags | OFlag::O_NOCTTY,
    }
}

/// The root's handle and the plain components of `path` below it.
fn walk_start<'p>(root: &Path, path: &'p Path) -> Result<(Arc<OwnedFd>, Vec<&'p OsStr>), IoError> {
    let rel = path.strip_prefix(root).map_err(|_| {
        let msg = format!("is not under the root {}", root.display());
        IoError::new(
            "opening",
            path,
            io::Error::new(io::ErrorKind::InvalidInput, msg),
        )
    })?;
    let mut parts = Vec::new();
    for comp in rel.components() {
        match comp {
            Component::Normal(p) => parts.push(p),
            Component::CurDir => {}
            _ => {
                let msg = "has a '..' or absolute component";
                return Err(IoError::new(
                    "opening",
                    path,
                    io::Error::new(io::ErrorKind::InvalidInput, msg),
                ));
            }
        }
    }
    Ok((root_handle(root)?, parts))
}

/// The root folder's handle, opened once per process and kept: every open
/// under the root starts from it (two system calls fewer each). The root
/// is the operator's: it is opened normally (it may be a link), and a root
/// replaced under a running process is not followed (restart it). One
/// root is kept, the last asked for; another is opened in its place.
fn root_handle(root: &Path) -> Result<Arc<OwnedFd>, IoError> {
    static KEPT: Mutex<Option<(std::path::PathBuf, Arc<OwnedFd>)>> = Mutex::new(None);
    let mut kept = KEPT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((path, fd)) = kept.as_ref()
        && path == root
    {
        return Ok(Arc::clone(fd));
    }
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let fd = nix::fcntl::open(root, flags, Mode::empty())
        .map_err(|e| IoError::new("opening root folder", root, e.into()))?;
    let fd = Arc::new(fd);
    *kept = Some((root.to_path_buf(), Arc::clone(&fd)));
    Ok(fd)
}

/// One `openat` of one component, then `fstat`: the type must be `expect`.
/// `full` is the path the caller asked for, `at` the component opened.
fn open_at(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    expect: Expect,
    flags: OFlag,
    full: &Path,
    at: &Path,
) -> Result<(OwnedFd, FileStat), IoError> {
    let flags = leaf_flags(flags, expect);
    let fd = match openat(dir, name, flags, Mode::from_bits_truncate(FILE_MODE)) {
        Ok(fd) => fd,
        // ELOOP: a symlink (O_NOFOLLOW); ENOTDIR: not a folder; ENXIO: a
        // FIFO without a writer opened for writing, or a device without
        // its driver. Say what is there.
        Err(e @ (Errno::ELOOP | Errno::ENOTDIR | Errno::ENXIO | Errno::EWOULDBLOCK)) => {
            return Err(match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) => refused_stat(full, at, &st, expect),
                Err(_) => IoError::new("opening", full, e.into()),
            });
        }
        Err(e) => return Err(IoError::new("opening", full, e.into())),
    };
    let st = fstat(&fd).map_err(|e| IoError::new("inspecting", full, e.into()))?;
    if !expect.matches(&st) {
        return Err(refused_stat(full, at, &st, expect));
    }
    Ok((fd, st))
}

fn refused_stat(full: &Path, at: &Path, st: &FileStat, expect: Expect) -> IoError {
    let what = format!("is {}, not {}", describe(st), expect.noun());
    refused(full, at, &what)
}

fn refused(full: &Path, at: &Path, what: &str) -> IoError {
    let what = if at == full {
        format!("{what}; refused (nothing under the root is followed or waited on)")
    } else {
        format!(
            "{} {what}; refused (nothing under the root is followed or waited on)",
            at.display()
        )
    };
    IoError::new("opening", full, io::Error::other(Refused { what }))
}

/// What kind of file `meta` describes, in words ("a FIFO", "a folder").
pub fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::MetadataExt;
    describe_mode(meta.mode())
}

/// What kind of file a `stat` describes, in words.
fn describe(st: &FileStat) -> &'static str {
    describe_mode(st.st_mode)
}

fn describe_mode(mode: u32) -> &'static str {
    let kind = SFlag::from_bits_truncate(mode) & SFlag::S_IFMT;
    match kind {
        k if k == SFlag::S_IFLNK => "a symlink",
        k if k == SFlag::S_IFIFO => "a FIFO",
        k if k == SFlag::S_IFCHR => "a character device",
        k if k == SFlag::S_IFBLK => "a block device",
        k if k == SFlag::S_IFSOCK => "a socket",
        k if k == SFlag::S_IFDIR => "a folder",
        k if k == SFlag::S_IFREG => "a regular file",
        _ => "of an unknown type",
    }
}

fn component_path(root: &Path, parts: &[&OsStr]) -> std::path::PathBuf {
    let mut p = root.to_path_buf();
    p.extend(parts);
    p
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // fixtures
mod tests {
    use super::super::read::read_capped;
    use super::*;
    use std::os::unix::fs::symlink;

    fn fixture() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("runs/a")).expect("dirs");
        std::fs::write(root.join("runs/a/f"), "0123456789").expect("write");
        (dir, root)
    }

    #[test]
    fn reads_are_capped() {
        let (_d, root) = fixture();
        let f = root.join("runs/a/f");
        assert_eq!(
            read_capped(&root, &f, 4).expect("read"),
            (b"0123".to_vec(), true)
        );
        assert!(!read_capped(&root, &f, 10).expect("read").1);
    }

    #[test]
    fn symlinks_at_any_depth_are_refused_and_named() {
        let (d, root) = fixture();
        let outside = d.path().join("outside");
        std::fs::create_dir_all(&outside).expect("outside");
        std::fs::write(outside.join("f"), "secret").expect("secret");
        symlink(&outside, root.join("runs/b")).expect("dir link");
        symlink(outside.join("f"), root.join("runs/a/l")).expect("file link");
        let e = read_capped(&root, &root.join("runs/b/f"), 100).expect_err("dir link");
        assert!(is_refusal(&e), "{e}");
        assert!(e.to_string().contains("runs/b is a symlink"), "{e}");
        let e = read_capped(&root, &root.join("runs/a/l"), 100).expect_err("file link");
        assert!(e.to_string().contains("is a symlink"), "{e}");
        assert!(create_dirs(&root, &root.join("runs/b/new")).is_err());
        assert!(!outside.join("new").exists(), "nothing created outside");
    }

    #[test]
    fn fifos_are_refused_without_blocking() {
        let (_d, root) = fixture();
        let fifo = root.join("runs/a/fifo");
        nix::unistd::mkfifo(&fifo, Mode::S_IRWXU).expect("mkfifo");
        let e = read_capped(&root, &fifo, 100).expect_err("fifo");
        assert!(e.to_string().contains("is a FIFO"), "{e}");
        let e = open_append(&root, &fifo).expect_err("fifo");
        assert!(is_refusal(&e), "{e}");
        let e = open_dir(&root, &fifo).expect_err("fifo as dir");
        assert!(e.to_string().contains("is a FIFO, not a folder"), "{e}");
    }

    #[test]
    fn missing_files_are_not_refusals() {
        let (_d, root) = fixture();
        let e = open_file(&root, &root.join("runs/a/nope")).expect_err("missing");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(!is_refusal(&e));
    }

    #[test]
    fn rename_goes_through_no_symlinked_folder() {
        let (d, root) = fixture();
        let outside = d.path().join("outside");
        std::fs::create_dir_all(&outside).expect("outside");
        symlink(&outside, root.join("archive")).expect("link");
        let from = root.join("runs/a/f");
        assert!(rename_noreplace(&root, &from, &root.join("archive/f")).is_err());
        assert!(from.exists(), "the file stays where it was");
        create_dirs(&root, &root.join("runs/c")).expect("mkdir");
        let to = root.join("runs/c/f");
        assert_eq!(
            rename_noreplace(&root, &from, &to).expect("rename"),
            Renamed::Done
        );
        assert_eq!(
            rename_noreplace(&root, &from, &to).expect("rename"),
            Renamed::SourceGone
        );
    }

    #[test]
    fn a_rename_within_one_folder_never_replaces() {
        let (_d, root) = fixture();
        let (from, to) = (root.join("runs/a/f"), root.join("runs/a/g"));
        std::fs::write(&to, "taken").expect("g");
        assert_eq!(
            rename_noreplace(&root, &from, &to).expect("rename"),
            Renamed::TargetExists
        );
        std::fs::remove_file(&to).expect("free g");
        assert_eq!(
            rename_noreplace(&root, &from, &to).expect("rename"),
            Renamed::Done
        );
        assert_eq!(std::fs::read(&to).expect("g"), b"0123456789");
        assert!(!from.exists());
    }

    #[test]
    fn a_folder_made_in_a_held_folder_is_checked_when_there() {
        let (d, root) = fixture();
        let held = open_dir(&root, &root.join("runs/a")).expect("held");
        let work = root.join("runs/a/work");
        create_dir_in(&root, &held, OsStr::new("work"), &work).expect("made");
        assert!(work.is_dir());
        create_dir_in(&root, &held, OsStr::new("work"), &work).expect("there");
        let outside = d.path().join("outside");
        std::fs::create_dir_all(&outside).expect("outside");
        symlink(&outside, root.join("runs/a/link")).expect("link");
        let e = create_dir_in(&root, &held, OsStr::new("link"), &root.join("runs/a/link"))
            .expect_err("a link is no folder");
        assert!(is_refusal(&e), "{e}");
    }
}
