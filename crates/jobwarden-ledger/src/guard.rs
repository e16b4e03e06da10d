//! What `ledger.db` must be before SQLite sees it (DESIGN §13, "trust
//! nothing under the root"): a job may leave a symlink, a FIFO or a folder
//! at `ledger.db`, `ledger.db-wal` or `ledger.db-shm`, before the daemon
//! starts or while it runs. Every opener of the ledger (the daemon, the
//! monitors, every command, the web page) goes through [`Ledger::open`]
//! and [`Ledger::open_snapshot`], which call this first:
//!
//! 1. each of the three is looked at without following a link or opening
//!    it ([`fsio::regular_identity`]: opening nothing, it never blocks on
//!    a FIFO and never drops the locks SQLite holds in this process); one
//!    that is there and not a regular file is refused as damage, naming
//!    the file and what was found, so the daemon goes on without the
//!    ledger and `history repair` moves the impostor aside;
//! 2. SQLite is given the root's canonical path and `SQLITE_OPEN_NOFOLLOW`:
//!    no component of it is a link, so a link swapped in at `ledger.db`
//!    after the check makes SQLite refuse the open, and SQLite opens the
//!    `-wal` and `-shm` beside it with `O_NOFOLLOW`;
//! 3. after SQLite opened it, `ledger.db` must still be the file checked
//!    (device and inode): one swapped in between is refused.
//!
//! [`Ledger::open`]: super::Ledger::open
//! [`Ledger::open_snapshot`]: super::Ledger::open_snapshot

use std::path::{Path, PathBuf};

use rusqlite::{ErrorCode, ffi};

use super::LedgerError;
use jobwarden_model::layout::sqlite_sidecars;
use jobwarden_sys::fsio;

/// A ledger file checked for SQLite: the name to give it, and the file
/// found there (device, inode), if any.
pub(super) struct Checked {
    pub sqlite_path: PathBuf,
    found: Option<(u64, u64)>,
}

/// Check `path` and its sidecars (see the module doc); an in-memory
/// database (`:memory:`) is passed through.
pub(super) fn check(path: &Path) -> Result<Checked, LedgerError> {
    let Some((root, name)) = root_and_name(path) else {
        return Ok(Checked {
            sqlite_path: path.to_path_buf(),
            found: None,
        });
    };
    let found = regular(root, path, path)?;
    for sidecar in sqlite_sidecars(path) {
        regular(root, path, &sidecar)?;
    }
    // The root is the operator's and may be reached through links; its
    // canonical path has none, so SQLite's NOFOLLOW refuses only a link
    // below it.
    let canonical = std::fs::canonicalize(root).map_err(|e| {
        let msg = format!("resolving the folder {}: {e}", root.display());
        failure(path, ffi::SQLITE_CANTOPEN, msg)
    })?;
    Ok(Checked {
        sqlite_path: canonical.join(name),
        found,
    })
}

/// After SQLite opened `checked`: `ledger.db` is still the file that was
/// checked (or, if there was none, a regular file now).
pub(super) fn verify(path: &Path, checked: &Checked) -> Result<(), LedgerError> {
    let Some((root, _)) = root_and_name(path) else {
        return Ok(());
    };
    let now = regular(root, path, path)?;
    match (checked.found, now) {
        (Some(before), Some(after)) if before != after => Err(failure(
            path,
            ffi::SQLITE_CORRUPT,
            format!(
                "{} was replaced while it was being opened; refused",
                path.display()
            ),
        )),
        _ => Ok(()),
    }
}

/// A failed open of a checked file, explained: SQLite's bare "unable to
/// open database file" becomes what is wrong with which file, when a
/// second look finds it (a link or a FIFO swapped in meanwhile).
pub(super) fn explain(path: &Path, e: LedgerError) -> LedgerError {
    if e.source.sqlite_error_code() != Some(ErrorCode::CannotOpen) {
        return e;
    }
    match check(path) {
        Err(found) => found,
        Ok(_) => e,
    }
}

fn root_and_name(path: &Path) -> Option<(&Path, &std::ffi::OsStr)> {
    let root = path.parent().filter(|p| !p.as_os_str().is_empty())?;
    Some((root, path.file_name()?))
}

/// The identity of the regular file `file` (the ledger `db` or one of its
/// sidecars), if any; anything else is damage of `db` (see the module doc).
fn regular(root: &Path, db: &Path, file: &Path) -> Result<Option<(u64, u64)>, LedgerError> {
    fsio::regular_identity(root, file).map_err(|e| {
        let code = if fsio::is_refusal(&e) {
            ffi::SQLITE_CORRUPT
        } else {
            ffi::SQLITE_CANTOPEN
        };
        failure(db, code, e.to_string())
    })
}

fn failure(path: &Path, code: i32, msg: String) -> LedgerError {
    LedgerError {
        path: path.to_path_buf(),
        source: rusqlite::Error::SqliteFailure(ffi::Error::new(code), Some(msg)),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use nix::sys::stat::Mode;

    use super::super::Ledger;

    #[test]
    fn links_fifos_and_folders_are_damage_naming_the_file_and_nothing_outside_is_made() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (root, outside) = (dir.path().join("root"), dir.path().join("outside"));
        std::fs::create_dir_all(&root).expect("root");
        std::fs::create_dir_all(&outside).expect("outside");
        let db = root.join("ledger.db");
        let wal = root.join("ledger.db-wal");
        let cases: [(&str, &dyn Fn()); 4] = [
            ("is a symlink", &|| {
                symlink(outside.join("made.db"), &db).expect("link")
            }),
            ("is a FIFO", &|| {
                nix::unistd::mkfifo(&db, Mode::S_IRWXU).expect("fifo")
            }),
            ("is a folder", &|| std::fs::create_dir(&db).expect("folder")),
            ("ledger.db-wal: is a symlink", &|| {
                symlink(outside.join("wal"), &wal).expect("wal link")
            }),
        ];
        for (found, make) in cases {
            make();
            let e = Ledger::open(&db).err().expect("refused");
            assert!(e.is_damaged(), "{e}");
            assert!(e.to_string().contains(found), "{e}");
            assert!(Ledger::open_snapshot(&db).is_err(), "{found}");
            assert_eq!(std::fs::read_dir(&outside).expect("outside").count(), 0);
            for p in [&db, &wal] {
                let _ = std::fs::remove_file(p).or_else(|_| std::fs::remove_dir(p));
            }
        }
        Ledger::open(&db).expect("a regular ledger opens");
        assert!(std::fs::symlink_metadata(&db).expect("made").is_file());
    }
}
