//! The single-instance lock: an exclusive `flock` on `daemon.lock`, held for
//! the daemon's whole life, with the holder's pid written inside so that a
//! refused second daemon can say who holds it.

use std::fs::File;
use std::io::{Seek, Write};

use nix::fcntl::Flock;

use crate::error::{DaemonError, IoContext};
use crate::fsio;
use crate::layout::Layout;

/// The held lock; released when dropped (or when the process dies).
pub struct DaemonLock {
    _lock: Flock<File>,
}

/// Take the lock or explain who holds it.
pub fn acquire(layout: &Layout) -> Result<DaemonLock, DaemonError> {
    let path = layout.daemon_lock();
    let Some(mut lock) = fsio::try_lock(layout.root(), &path)? else {
        let pid = fsio::read_capped(layout.root(), &path, 64)
            .ok()
            .and_then(|(bytes, _)| String::from_utf8(bytes).ok())
            .and_then(|t| t.trim().parse().ok());
        return Err(DaemonError::AlreadyRunning { lock: path, pid });
    };
    let write_pid = |f: &mut File| -> std::io::Result<()> {
        f.set_len(0)?;
        f.rewind()?;
        writeln!(f, "{}", std::process::id())
    };
    write_pid(&mut lock).ctx("writing pid to lock", &path)?;
    Ok(DaemonLock { _lock: lock })
}
