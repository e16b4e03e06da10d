//! An inotify instance registered with the tokio runtime: the one setup
//! that the monitor's ABORT watch and the daemon's watch of queued jobs'
//! run folders share. A fact of the machine; it knows nothing of jobs.

use std::os::fd::{AsFd, AsRawFd, RawFd};

use nix::sys::inotify::{InitFlags, Inotify};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// `AsyncFd` wants `AsRawFd`; nix's `Inotify` offers `AsFd`.
pub struct InotifyFd(pub Inotify);

impl AsRawFd for InotifyFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// A new non-blocking inotify instance, registered with the runtime (call
/// within it).
pub fn async_inotify() -> std::io::Result<AsyncFd<InotifyFd>> {
    let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
    // SAFETY: the Inotify owns its descriptor, which stays open and the same
    // for as long as the AsyncFd owns the Inotify.
    unsafe { AsyncFd::register_with_interest(InotifyFd(ino), Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
}
