//! The single-instance lock: an exclusive `flock` on `daemon.lock`, held for
//! the daemon's whole life, with the holder's pid written inside so that a
//! refused second daemon can say who holds it.
//!
//! The lock file alone does not make the daemon single: a job can remove
//! `daemon.lock` and make it again, and the new file's lock is free. So a
//! daemon that took the lock also looks for another process proven to be
//! this root's daemon ([`jobwarden_engine::proof::prove_daemon`]), and refuses to
//! start beside it. Something that is not a regular file at `daemon.lock`
//! (a FIFO, a symlink, a folder: never opened, so never blocked on) is
//! moved aside as `daemon.lock.displaced-<ms>`, kept, and the daemon starts.

use std::fs::File;
use std::io::{Seek, Write};

use nix::fcntl::Flock;

use jobwarden_engine::failure::DaemonError;
use jobwarden_engine::proof;
use jobwarden_model::layout::Layout;
use jobwarden_sys::clock::Timestamp;
use jobwarden_sys::error::{IoContext, IoError};
use jobwarden_sys::fsio;
use jobwarden_sys::procfs::{self, Proc};

/// The held lock; released when dropped (or when the process dies).
pub struct DaemonLock {
    _lock: Flock<File>,
}

/// Take the lock or explain who holds it.
pub fn acquire(layout: &Layout) -> Result<DaemonLock, DaemonError> {
    let path = layout.daemon_lock();
    let Some(mut lock) = try_lock(layout)? else {
        let pid = fsio::read_capped(layout.root(), &path, 64)
            .ok()
            .and_then(|(bytes, _)| String::from_utf8(bytes).ok())
            .and_then(|t| t.trim().parse().ok());
        return Err(DaemonError::AlreadyRunning { lock: path, pid });
    };
    if let Some(other) = proof::other_daemon(layout.root()) {
        return Err(DaemonError::AlreadyRunning {
            lock: path,
            pid: Some(other.pid),
        });
    }
    let write_pid = |f: &mut File| -> std::io::Result<()> {
        f.set_len(0)?;
        f.rewind()?;
        writeln!(f, "{}", std::process::id())
    };
    write_pid(&mut lock).ctx("writing pid to lock", &path)?;
    Ok(DaemonLock { _lock: lock })
}

/// Lock `daemon.lock`; an impostor in its place is moved aside first.
fn try_lock(layout: &Layout) -> Result<Option<Flock<File>>, IoError> {
    let path = layout.daemon_lock();
    match fsio::try_lock(layout.root(), &path) {
        Err(e) if fsio::is_refusal(&e) => {
            let aside = layout.displaced(&path, Timestamp::now().epoch_ms());
            fsio::rename_noreplace(layout.root(), &path, &aside)?;
            tracing::warn!(
                "{e}; moved it aside to {} (kept, not opened) and made {} again",
                aside.display(),
                path.display()
            );
            fsio::try_lock(layout.root(), &path)
        }
        other => other,
    }
}

/// The root's running daemon, proven ([`proof::find_daemon`]): what a
/// command that signals it signals. The pids that files name (the holder
/// of `daemon.lock`, `daemon.json`'s) are tried first; none is signalled
/// on their word. `Err`: no daemon, and why each named pid is not it.
pub fn running_daemon(layout: &Layout) -> Result<Proc, Vec<String>> {
    let mut named = procfs::flock_holders(&layout.daemon_lock()).unwrap_or_default();
    if let Ok(Some(seen)) = super::state_file::read(layout)
        && let Ok(pid) = i32::try_from(seen.pid)
        && !named.contains(&pid)
    {
        named.push(pid);
    }
    proof::find_daemon(layout.root(), &named)
}

/// What `status` believes of `daemon.lock`'s holder (`holder`, read from
/// `/proc/locks`): a holder not proven to be this root's daemon (a job
/// linked another locked file there) is replaced by the daemon proven
/// otherwise, if one runs, else by nobody; the second value then says why.
pub fn proven_holder(
    layout: &Layout,
    holder: std::io::Result<Option<i32>>,
) -> (std::io::Result<Option<i32>>, Option<String>) {
    let Ok(Some(pid)) = holder else {
        return (holder, None);
    };
    let Err(why) = proof::prove_daemon(pid, layout.root()) else {
        return (Ok(Some(pid)), None);
    };
    let found = running_daemon(layout).ok().map(|p| p.pid);
    let said = format!(
        "{} is held by a process that is not this root's daemon ({why}); a job may have \
         replaced it: restart the daemon to take its lock again",
        layout.daemon_lock().display()
    );
    (Ok(found), Some(said))
}
