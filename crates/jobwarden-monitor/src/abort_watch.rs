//! Noticing a job's ABORT marker within milliseconds: inotify on the run
//! folder (a scarce per-user resource, 128 instances by default), or, when
//! no instance can be had, a cheap `stat` every 100 ms. The heartbeat tick
//! checks too, as a last resort.
//!
//! Closing an inotify instance that ever had a watch waits for the
//! kernel's mark reaper (an RCU grace period, 10–20 ms). So a monitor has
//! one instance for its whole life, shared by the jobs it supervises one
//! after another, and each job's watch is removed as soon as its commands
//! are over ([`AbortWatch::stop`]): the reaper has run long before the
//! monitor exits and closes it.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use nix::sys::inotify::{AddWatchFlags, WatchDescriptor};
use tokio::io::unix::AsyncFd;

use jobwarden_sys::inotify::{InotifyFd, async_inotify};

const POLL_EVERY: Duration = Duration::from_millis(100);

/// Resolves when the marker exists.
pub struct AbortWatch {
    marker: PathBuf,
    source: Source,
    /// Whether the marker's existence was looked at since the watch began
    /// (a marker made after that is an event of the watch).
    looked: bool,
}

enum Source {
    Inotify(Rc<AsyncFd<InotifyFd>>, Option<WatchDescriptor>),
    Poll(tokio::time::Interval),
}

thread_local! {
    /// This monitor's inotify instance (the runtime is current-thread, so
    /// every job's watch is made on this thread).
    static INSTANCE: std::cell::RefCell<Option<Rc<AsyncFd<InotifyFd>>>> =
        const { std::cell::RefCell::new(None) };
}

impl AbortWatch {
    /// Start watching. Call before checking for an existing marker, so that
    /// one created in between is not missed.
    pub fn start(run_dir: &Path, marker: PathBuf) -> Self {
        let source = match inotify_on(run_dir) {
            Ok((fd, wd)) => Source::Inotify(fd, Some(wd)),
            Err(e) => {
                tracing::info!("no inotify for the ABORT marker ({e}); checking it every 100 ms");
                Source::Poll(tokio::time::interval(POLL_EVERY))
            }
        };
        AbortWatch {
            marker,
            source,
            looked: false,
        }
    }

    /// The caller looked for the marker after the watch began: a marker
    /// made since is an event of the watch, and [`AbortWatch::fired`]
    /// need not look again before waiting for one.
    pub fn looked(&mut self) {
        self.looked = true;
    }

    /// Stop watching: nothing of the job runs any more. Removing the watch
    /// now lets the kernel reap it in the background (see the module docs).
    /// A watch the kernel already dropped (the folder was removed) is fine.
    pub fn stop(&mut self) {
        if let Source::Inotify(fd, wd) = &mut self.source
            && let Some(wd) = wd.take()
        {
            let _ = fd.get_ref().0.rm_watch(wd);
        }
    }

    /// Wait until the marker exists. Under inotify its existence is
    /// looked at once the watch names it (or lost events, or failed), and
    /// before waiting only if nobody looked since the watch began.
    pub async fn fired(&mut self) {
        loop {
            // Polled, or nobody looked since the watch began: look now.
            let look = !self.looked || matches!(self.source, Source::Poll(_));
            self.looked = true;
            if look && std::fs::symlink_metadata(&self.marker).is_ok() {
                return;
            }
            match &mut self.source {
                Source::Inotify(fd, _) => wait_for_name(fd, self.marker.file_name()).await,
                Source::Poll(tick) => {
                    tick.tick().await;
                }
            }
            // Woken: look now.
            self.looked = false;
        }
    }
}

impl Drop for AbortWatch {
    /// A job that ended without running (aborted while queued) never
    /// stopped its watch: the instance outlives the job.
    fn drop(&mut self) {
        self.stop();
    }
}

fn inotify_on(dir: &Path) -> std::io::Result<(Rc<AsyncFd<InotifyFd>>, WatchDescriptor)> {
    let fd = instance()?;
    let wd = fd
        .get_ref()
        .0
        .add_watch(dir, AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO)?;
    Ok((fd, wd))
}

/// This monitor's inotify instance, made at its first job. Events of an
/// earlier job's watch still queued are read and ignored: only the
/// marker's existence decides.
fn instance() -> std::io::Result<Rc<AsyncFd<InotifyFd>>> {
    if let Some(fd) = INSTANCE.with_borrow(Option::clone) {
        return Ok(fd);
    }
    let fd = Rc::new(async_inotify()?);
    INSTANCE.set(Some(fd.clone()));
    Ok(fd)
}

/// Wait for events until one names `name`, or says events were lost (or
/// the fd fails): then return and let the caller's existence check decide.
async fn wait_for_name(fd: &AsyncFd<InotifyFd>, name: Option<&OsStr>) {
    loop {
        let Ok(mut guard) = fd.readable().await else {
            return;
        };
        match guard.get_inner().0.read_events() {
            Ok(events) => {
                if events.iter().any(|e| {
                    e.name.as_deref() == name || e.mask.contains(AddWatchFlags::IN_Q_OVERFLOW)
                }) {
                    return;
                }
            }
            Err(nix::errno::Errno::EAGAIN) => guard.clear_ready(),
            Err(_) => return,
        }
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // files a test makes as a job would
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    #[test]
    fn a_marker_made_after_the_caller_looked_fires_and_other_files_do_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let marker = dir.path().join("ABORT");
        runtime().block_on(async {
            let mut watch = AbortWatch::start(dir.path(), marker.clone());
            watch.looked();
            std::fs::write(dir.path().join("job.log"), "x").expect("a file of the job");
            let early = tokio::time::timeout(Duration::from_millis(200), watch.fired()).await;
            assert!(early.is_err(), "another file is no marker");
            std::fs::write(&marker, "stop").expect("the marker");
            tokio::time::timeout(Duration::from_secs(5), watch.fired())
                .await
                .expect("the marker fired");
        });
    }

    #[test]
    fn a_marker_made_before_the_watch_fires_unless_the_caller_looked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let marker = dir.path().join("ABORT");
        std::fs::write(&marker, "stop").expect("the marker");
        runtime().block_on(async {
            let mut watch = AbortWatch::start(dir.path(), marker.clone());
            tokio::time::timeout(Duration::from_secs(5), watch.fired())
                .await
                .expect("nobody looked: it looks first");
        });
    }
}
