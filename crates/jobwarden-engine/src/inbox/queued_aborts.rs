//! The queued jobs' run folders, watched for their `ABORT` (and a
//! `PRIORITY` request) on one inotify
//! instance of the daemon's own, with one small table entry per job (its
//! watch and its id).
//!
//! A marker is taken when it is moved in or closed after writing, so that
//! the reason written in it is read whole.
//!
//! Through `notify` each watch cost about 600 bytes of the daemon's memory
//! (its path twice in the crate's tables, and once in ours), which a burst
//! of 10,000 waiting prompts multiplied into megabytes. A marker no event
//! reports (the instance's queue overflowed, no watch could be added) is
//! still found by the daemon's tick, which reads every queued job's marker.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use nix::sys::inotify::{AddWatchFlags, WatchDescriptor};
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc::UnboundedSender;

use super::Signal;
use jobwarden_model::job::JobId;
use jobwarden_model::layout::ABORT_FILE;
use jobwarden_model::priority::PRIORITY_FILE;
use jobwarden_sys::inotify::{InotifyFd, async_inotify};

/// What is watched: by watch (for events), by job (for removal).
#[derive(Default)]
struct Table {
    jobs: HashMap<WatchDescriptor, JobId>,
    watches: HashMap<JobId, WatchDescriptor>,
}

/// The watches; dropping it ends the reader task and closes the instance.
pub struct QueuedAborts {
    fd: Arc<AsyncFd<InotifyFd>>,
    table: Arc<Mutex<Table>>,
    reader: tokio::task::JoinHandle<()>,
}

impl QueuedAborts {
    /// A new instance whose markers are told on `tx` as
    /// [`Signal::Abort`]. Must be called within the runtime.
    pub fn start(tx: UnboundedSender<Signal>) -> std::io::Result<Self> {
        let fd = Arc::new(async_inotify()?);
        let table = Arc::new(Mutex::new(Table::default()));
        let reader = tokio::spawn(read_events(fd.clone(), table.clone(), tx));
        Ok(QueuedAborts { fd, table, reader })
    }

    /// Watch job `id`'s run folder. Best effort: without a watch the tick
    /// finds the marker.
    pub fn watch(&self, id: &JobId, run_dir: &Path) {
        // A marker is complete when moved in or closed after writing (its
        // reason is in it); one merely created may still be being written.
        let flags = AddWatchFlags::IN_CLOSE_WRITE
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_ONLYDIR
            | AddWatchFlags::IN_DONT_FOLLOW;
        match self.fd.get_ref().0.add_watch(run_dir, flags) {
            Ok(wd) => {
                let mut table = lock(&self.table);
                if let Some(old) = table.watches.insert(id.clone(), wd) {
                    table.jobs.remove(&old);
                }
                table.jobs.insert(wd, id.clone());
            }
            Err(e) => tracing::debug!(
                "not watching {}: {e}; its ABORT is checked on the tick",
                run_dir.display()
            ),
        }
    }

    /// Stop watching job `id`'s run folder (it started, or left the queue).
    pub fn unwatch(&self, id: &JobId) {
        let mut table = lock(&self.table);
        let Some(wd) = table.watches.remove(id) else {
            return;
        };
        table.jobs.remove(&wd);
        let emptied = table.watches.is_empty();
        if emptied {
            // A burst's tables give their memory back once it is over.
            table.watches.shrink_to_fit();
            table.jobs.shrink_to_fit();
        }
        drop(table);
        // The kernel already dropped it if the folder is gone.
        let _ = self.fd.get_ref().0.rm_watch(wd);
    }
}

impl Drop for QueuedAborts {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

fn lock(table: &Mutex<Table>) -> MutexGuard<'_, Table> {
    table.lock().unwrap_or_else(|e| e.into_inner())
}

/// Tell the daemon of each marker created or moved into a watched folder,
/// until the instance fails or the daemon's receiver is gone.
async fn read_events(
    fd: Arc<AsyncFd<InotifyFd>>,
    table: Arc<Mutex<Table>>,
    tx: UnboundedSender<Signal>,
) {
    loop {
        let Ok(mut guard) = fd.readable().await else {
            return;
        };
        let events = match guard.get_inner().0.read_events() {
            Ok(events) => events,
            Err(nix::errno::Errno::EAGAIN) => {
                guard.clear_ready();
                continue;
            }
            Err(e) => {
                tracing::warn!(
                    "reading the queued jobs' ABORT watch failed: {e}; their markers are checked on the tick"
                );
                return;
            }
        };
        let mut found = Vec::new();
        {
            let mut table = lock(&table);
            for event in events {
                if event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    tracing::debug!("the queued jobs' ABORT watch overflowed; the tick reads them");
                } else if event.mask.contains(AddWatchFlags::IN_IGNORED) {
                    // The folder is gone: the kernel dropped its watch.
                    if let Some(id) = table.jobs.remove(&event.wd) {
                        table.watches.remove(&id);
                    }
                } else if let Some(id) = table.jobs.get(&event.wd) {
                    let name = event.name.as_deref();
                    if name == Some(std::ffi::OsStr::new(ABORT_FILE)) {
                        found.push(Signal::Abort(id.clone()));
                    } else if name == Some(std::ffi::OsStr::new(PRIORITY_FILE)) {
                        found.push(Signal::Priority(id.clone()));
                    }
                }
            }
        }
        for signal in found {
            if tx.send(signal).is_err() {
                return;
            }
        }
    }
}
