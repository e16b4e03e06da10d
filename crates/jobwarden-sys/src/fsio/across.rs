//! A rename that crosses filesystems (`EXDEV`): an inbox shared by several
//! hosts is a filesystem of its own, and a claimed prompt still goes to
//! the host's `archive/` (and a retried one back). Done as a copy that is
//! never half there and never replaces a file, after which the source is
//! removed only if it is still the file that was copied:
//!
//! 1. the source's bytes to a temporary name in the target's folder,
//!    fsynced;
//! 2. the temporary renamed to the target without replacing a file
//!    (`TargetExists` if taken, unless the target already holds the very
//!    bytes: an earlier move cut short before its last step);
//! 3. the source unlinked, once `fstatat` shows it is still the copied
//!    file (same device and inode). If it is gone or another file took
//!    its name, someone else moved it first: the source is reported gone,
//!    and the copy stays (it may be the only one left: a finisher finds
//!    it by its digest).
//!
//! A crash between 2 and 3 leaves the prompt in both places, never in
//! none: a finisher that runs again finds the target holding its bytes
//! and completes step 3.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, RenameFlags, openat, renameat2};
use nix::sys::stat::{Mode, SFlag, fstat, fstatat};
use nix::unistd::{UnlinkatFlags, unlinkat};

use super::{FILE_MODE, Renamed};
use crate::error::{IoContext, IoError};

/// Largest file moved across filesystems: prompts are far smaller.
const MAX_MOVE: u64 = 1 << 30;

/// Move `from` (in folder `src`) to `to` (in folder `dst`, on another
/// filesystem) as the module says.
pub(super) fn move_across(
    (src, from_name, from_path): (&File, &OsStr, &Path),
    (dst, to_name, to_path): (&File, &OsStr, &Path),
) -> Result<Renamed, IoError> {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
    let fd = match openat(src, from_name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(Renamed::SourceGone),
        Err(e) => return Err(IoError::new("opening", from_path, e.into())),
    };
    let st = fstat(&fd).map_err(|e| IoError::new("inspecting", from_path, e.into()))?;
    if SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) != SFlag::S_IFREG {
        let what =
            io::Error::other("is not a regular file; only a file is moved to another filesystem");
        return Err(IoError::new("moving", from_path, what));
    }
    let mut bytes = Vec::new();
    File::from(fd)
        .take(MAX_MOVE + 1)
        .read_to_end(&mut bytes)
        .ctx("reading", from_path)?;
    if bytes.len() as u64 > MAX_MOVE {
        let what = io::Error::other("is larger than 1 GiB; not moved to another filesystem");
        return Err(IoError::new("moving", from_path, what));
    }
    let temp = super::temp_name(to_name);
    let temp_path = to_path.with_file_name(&temp);
    write_new(dst, &temp, &temp_path, &bytes)?;
    match renameat2(
        dst,
        temp.as_os_str(),
        dst,
        to_name,
        RenameFlags::RENAME_NOREPLACE,
    ) {
        Ok(()) => {}
        Err(Errno::EEXIST) => {
            let _ = unlinkat(dst, temp.as_os_str(), UnlinkatFlags::NoRemoveDir);
            if !holds(dst, to_name, &bytes) {
                return Ok(Renamed::TargetExists);
            }
            // An earlier move of these bytes stopped before its last step.
        }
        Err(e) => {
            let _ = unlinkat(dst, temp.as_os_str(), UnlinkatFlags::NoRemoveDir);
            return Err(IoError::new("renaming", &temp_path, e.into()));
        }
    }
    super::batch::sync(
        dst,
        "syncing directory",
        to_path.parent().unwrap_or(to_path),
    )?;
    let same = fstatat(src, from_name, AtFlags::AT_SYMLINK_NOFOLLOW)
        .is_ok_and(|now| now.st_dev == st.st_dev && now.st_ino == st.st_ino);
    if !same {
        // Moved by someone else meanwhile. The copy stays: it may be the
        // only one (another mover of the same bytes may have removed the
        // source already); a finisher finds it by its digest.
        return Ok(Renamed::SourceGone);
    }
    match unlinkat(src, from_name, UnlinkatFlags::NoRemoveDir) {
        Ok(()) => Ok(Renamed::Done),
        Err(Errno::ENOENT) => Ok(Renamed::SourceGone),
        Err(e) => Err(IoError::new("removing", from_path, e.into())),
    }
}

/// Does `name` in `dir` hold exactly `bytes`?
fn holds(dir: &File, name: &OsStr, bytes: &[u8]) -> bool {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
    let Ok(fd) = openat(dir, name, flags, Mode::empty()) else {
        return false;
    };
    let mut there = Vec::new();
    File::from(fd)
        .take(bytes.len() as u64 + 1)
        .read_to_end(&mut there)
        .is_ok_and(|_| there == bytes)
}

/// Create `name` in `dir` with `bytes`, fsynced; never an existing file.
fn write_new(dir: &File, name: &OsStr, path: &Path, bytes: &[u8]) -> Result<(), IoError> {
    let flags =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = openat(dir, name, flags, Mode::from_bits_truncate(FILE_MODE))
        .map_err(|e| IoError::new("creating", path, e.into()))?;
    let mut f = File::from(fd);
    let written = f
        .write_all(bytes)
        .ctx("writing", path)
        .and_then(|()| f.sync_all().ctx("syncing", path));
    if written.is_err() {
        let _ = unlinkat(dir, name, UnlinkatFlags::NoRemoveDir);
    }
    written
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // fixtures
mod tests {
    use super::*;

    /// The two folders of a move, and their handles.
    fn folders() -> (tempfile::TempDir, File, File) {
        let dir = tempfile::tempdir().expect("tempdir");
        for sub in ["from", "to"] {
            std::fs::create_dir(dir.path().join(sub)).expect("mkdir");
        }
        let open = |sub: &str| File::open(dir.path().join(sub)).expect("open folder");
        let (src, dst) = (open("from"), open("to"));
        (dir, src, dst)
    }

    fn go(dir: &Path, src: &File, dst: &File) -> Renamed {
        let (from, to) = (dir.join("from/p.md"), dir.join("to/p.md"));
        move_across(
            (src, OsStr::new("p.md"), &from),
            (dst, OsStr::new("p.md"), &to),
        )
        .expect("move")
    }

    #[test]
    fn a_move_copies_then_removes_the_source_and_leaves_no_temporary() {
        let (dir, src, dst) = folders();
        std::fs::write(dir.path().join("from/p.md"), b"prompt").expect("write");
        assert_eq!(go(dir.path(), &src, &dst), Renamed::Done);
        assert!(!dir.path().join("from/p.md").exists());
        assert_eq!(
            std::fs::read(dir.path().join("to/p.md")).expect("read"),
            b"prompt"
        );
        let left: Vec<_> = std::fs::read_dir(dir.path().join("to"))
            .expect("ls")
            .collect();
        assert_eq!(left.len(), 1, "only the moved file is in the target folder");
    }

    #[test]
    fn a_taken_target_is_never_replaced_and_the_source_stays() {
        let (dir, src, dst) = folders();
        std::fs::write(dir.path().join("from/p.md"), b"mine").expect("write");
        std::fs::write(dir.path().join("to/p.md"), b"theirs").expect("write");
        assert_eq!(go(dir.path(), &src, &dst), Renamed::TargetExists);
        assert_eq!(
            std::fs::read(dir.path().join("from/p.md")).expect("read"),
            b"mine"
        );
        assert_eq!(
            std::fs::read(dir.path().join("to/p.md")).expect("read"),
            b"theirs"
        );
    }

    #[test]
    fn a_move_cut_short_after_its_copy_is_finished_by_the_next() {
        let (dir, src, dst) = folders();
        std::fs::write(dir.path().join("from/p.md"), b"same").expect("write");
        std::fs::write(dir.path().join("to/p.md"), b"same").expect("write");
        assert_eq!(go(dir.path(), &src, &dst), Renamed::Done);
        assert!(!dir.path().join("from/p.md").exists());
        assert_eq!(
            std::fs::read(dir.path().join("to/p.md")).expect("read"),
            b"same"
        );
    }

    #[test]
    fn a_source_already_gone_is_said_and_nothing_is_made() {
        let (dir, src, dst) = folders();
        assert_eq!(go(dir.path(), &src, &dst), Renamed::SourceGone);
        assert!(!dir.path().join("to/p.md").exists());
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let (dir, src, dst) = folders();
        nix::unistd::mkfifo(
            &dir.path().join("from/p.md"),
            Mode::from_bits_truncate(0o600),
        )
        .expect("mkfifo");
        let (from, to) = (dir.path().join("from/p.md"), dir.path().join("to/p.md"));
        let moved = move_across(
            (&src, OsStr::new("p.md"), &from),
            (&dst, OsStr::new("p.md"), &to),
        );
        assert!(moved.is_err(), "a FIFO is not moved: {moved:?}");
        assert!(!to.exists());
    }
}
