//! Group commit: the fsyncs of many writes made as one.
//!
//! Every write in `fsio` is durable when it returns, unless it is made
//! inside a [`Batch`] on the same thread: then its fsyncs are owed to the
//! batch, each file or folder at most once, and made by [`Batch::commit`].
//! Whoever opens a batch promises to act on nothing written inside it (start
//! no job, report no claim) until `commit` has returned `Ok`. Readers in
//! other processes see every write at once, as always; only a crash of the
//! machine before the commit can lose some of them, and the daemon's claims,
//! the one user, are recoverable from any subset (see `claim.rs`).
//!
//! Why: claiming a burst of prompts one fsync sequence at a time costs five
//! fsyncs per prompt, each a journal commit and a device flush. In a batch
//! the inbox and `runs/` folders are synced once for all of them.
//!
//! A batch opened while another is open on the thread joins it: the outer
//! one commits. A batch dropped without a commit (an early return, a panic)
//! makes its fsyncs then, errors ignored, so nothing is silently left owed.

use std::cell::RefCell;
use std::collections::HashSet;
use std::fs::File;
use std::marker::PhantomData;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::IoError;

/// What the open batch owes: one handle per file or folder, in the order
/// first written.
#[derive(Default)]
struct Owed {
    handles: Vec<Handle>,
    /// Device and inode of each handle, so that each is synced once.
    seen: HashSet<(u64, u64)>,
    /// The first error of an early sync (see [`OWED_MAX`]), for the commit.
    failed: Option<IoError>,
}

/// Most handles a batch holds (each an open descriptor): at this many,
/// they are synced at once and the batch goes on, owing the next writes
/// (a rescan that finds thousands of prompts must not run the daemon out
/// of descriptors).
const OWED_MAX: usize = 64;

thread_local! {
    static OWED: RefCell<Option<Owed>> = const { RefCell::new(None) };
}

/// An open group commit on this thread (see the module docs).
#[must_use = "a batch's writes are durable only once it is committed"]
pub struct Batch {
    /// Joined an outer batch: that one commits.
    joined: bool,
    done: bool,
    /// Bound to the thread whose writes it owes.
    _thread: PhantomData<*const ()>,
}

/// Open a batch on this thread.
pub fn batch() -> Batch {
    let joined = OWED.with(|owed| {
        let mut owed = owed.borrow_mut();
        if owed.is_some() {
            return true;
        }
        *owed = Some(Owed::default());
        false
    });
    Batch {
        joined,
        done: false,
        _thread: PhantomData,
    }
}

impl Batch {
    /// Make every write of the batch durable: fsync each file and folder it
    /// owes, once. The first failure is returned after the others were
    /// still tried.
    pub fn commit(mut self) -> Result<usize, IoError> {
        self.done = true;
        if self.joined {
            return Ok(0);
        }
        sync_owed()
    }
}

impl Batch {
    /// Close the batch without its fsyncs: what it owes is handed back, to
    /// be synced later with others ([`Deferred::commit`]). Only for writes
    /// whose loss recovery redoes (a prompt's move to the archive after
    /// its job's end is durable). A joined batch hands back nothing.
    pub fn defer(mut self) -> Deferred {
        self.done = true;
        if self.joined {
            return Deferred::default();
        }
        let owed = OWED
            .with(|owed| owed.borrow_mut().take())
            .unwrap_or_default();
        Deferred(owed)
    }
}

/// fsyncs owed by closed batches, made later all at once.
#[derive(Default)]
pub struct Deferred(Owed);

impl Deferred {
    /// Nothing owed.
    pub fn is_empty(&self) -> bool {
        self.0.handles.is_empty() && self.0.failed.is_none()
    }

    /// Owe what `other` owes too, each file or folder once; at
    /// [`OWED_MAX`] handles, they are synced at once.
    pub fn absorb(&mut self, other: Deferred) {
        let Deferred(other) = other;
        self.0.failed = self.0.failed.take().or(other.failed);
        for handle in other.handles {
            let seen = handle.0.metadata().map(|m| (m.dev(), m.ino()));
            if seen.is_ok_and(|key| !self.0.seen.insert(key)) {
                continue;
            }
            self.0.handles.push(handle);
        }
        if self.0.handles.len() >= OWED_MAX {
            self.0.seen.clear();
            let early = std::mem::take(&mut self.0.handles);
            let error = sync_all(&early);
            self.0.failed = self.0.failed.take().or(error);
        }
    }

    /// Make everything owed durable; the first failure after all were tried.
    pub fn commit(&mut self) -> Result<usize, IoError> {
        let owed = std::mem::take(&mut self.0);
        let count = owed.handles.len();
        let error = sync_all(&owed.handles);
        owed.failed.or(error).map_or(Ok(count), Err)
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        if !self.done && !self.joined {
            let _ = sync_owed();
        }
    }
}

/// Above this many handles owed, a commit syncs them from this many
/// threads at once: concurrent fsyncs share the filesystem's journal
/// commits and device flushes, where one after another each waits for its
/// own (a burst's group of 256 claims owes about 800).
const SYNC_THREADS: usize = 8;

/// Fewer handles than this are synced on the committing thread: starting
/// threads costs more than it saves.
const THREADED_ABOVE: usize = 32;

type Handle = (File, PathBuf, &'static str);

fn sync_owed() -> Result<usize, IoError> {
    let owed = OWED
        .with(|owed| owed.borrow_mut().take())
        .unwrap_or_default();
    let count = owed.handles.len();
    let error = sync_all(&owed.handles);
    owed.failed.or(error).map_or(Ok(count), Err)
}

/// fsync every handle, from several threads when there are many; the
/// first error.
fn sync_all(handles: &[Handle]) -> Option<IoError> {
    if handles.len() <= THREADED_ABOVE {
        return sync_each(handles);
    }
    let per_thread = handles.len().div_ceil(SYNC_THREADS);
    std::thread::scope(|s| {
        let mut first = None;
        let mut workers = Vec::new();
        for chunk in handles.chunks(per_thread) {
            match std::thread::Builder::new().spawn_scoped(s, move || sync_each(chunk)) {
                Ok(worker) => workers.push(worker),
                // No thread to be had: this chunk is synced here.
                Err(_) => first = first.or(sync_each(chunk)),
            }
        }
        for worker in workers {
            let error = worker.join().unwrap_or_else(|_| {
                Some(IoError::new(
                    "syncing",
                    Path::new("(a group commit)"),
                    std::io::Error::other("a sync thread panicked"),
                ))
            });
            first = first.or(error);
        }
        first
    })
}

/// fsync every handle, whatever fails; the first error.
fn sync_each(handles: &[Handle]) -> Option<IoError> {
    let mut first_error = None;
    for (handle, path, what) in handles {
        if let Err(e) = handle.sync_all()
            && first_error.is_none()
        {
            first_error = Some(IoError::new(what, path, e));
        }
    }
    first_error
}

/// fsync `handle` now, or owe it to the open batch. `what` and `path` name
/// it in an error ("syncing directory", the folder).
pub(super) fn sync(handle: &File, what: &'static str, path: &Path) -> Result<(), IoError> {
    let deferred = OWED.with(|owed| {
        let mut owed = owed.borrow_mut();
        let Some(owed) = owed.as_mut() else {
            return Ok(false);
        };
        let meta = handle.metadata().map_err(|e| IoError::new(what, path, e))?;
        if owed.seen.insert((meta.dev(), meta.ino())) {
            let dup = handle
                .try_clone()
                .map_err(|e| IoError::new(what, path, e))?;
            owed.handles.push((dup, path.to_path_buf(), what));
        }
        if owed.handles.len() >= OWED_MAX {
            // Synced now; a folder written again later is owed again.
            owed.seen.clear();
            let early = std::mem::take(&mut owed.handles);
            let error = sync_all(&early);
            owed.failed = owed.failed.take().or(error);
        }
        Ok(true)
    })?;
    if deferred {
        return Ok(());
    }
    handle.sync_all().map_err(|e| IoError::new(what, path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_owes_each_file_once_and_outer_batches_commit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = File::create(dir.path().join("a")).expect("a");
        let outer = batch();
        sync(&a, "syncing", &dir.path().join("a")).expect("owed");
        let inner = batch();
        sync(&a, "syncing", &dir.path().join("a")).expect("owed again");
        let d = File::open(dir.path()).expect("dir");
        sync(&d, "syncing directory", dir.path()).expect("owed");
        assert_eq!(inner.commit().expect("joined"), 0);
        assert_eq!(outer.commit().expect("committed"), 2);
        // No batch open: synced at once, nothing owed.
        sync(&a, "syncing", &dir.path().join("a")).expect("synced");
        assert!(OWED.with(|o| o.borrow().is_none()));
    }

    #[test]
    fn deferred_batches_owe_each_folder_once_until_committed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = File::open(dir.path()).expect("dir");
        let mut later = Deferred::default();
        for _ in 0..3 {
            let group = batch();
            sync(&d, "syncing directory", dir.path()).expect("owed");
            later.absorb(group.defer());
            assert!(OWED.with(|o| o.borrow().is_none()), "the batch is closed");
        }
        assert!(!later.is_empty());
        assert_eq!(later.commit().expect("committed"), 1);
        assert!(later.is_empty());
        assert_eq!(later.commit().expect("nothing"), 0);
    }

    /// Open descriptors of this process.
    fn open_fds() -> usize {
        std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count)
    }

    #[test]
    fn a_large_batch_holds_few_descriptors_and_owes_a_folder_again_after_an_early_sync() {
        let dir = tempfile::tempdir().expect("tempdir");
        let before = open_fds();
        let group = batch();
        let files: Vec<PathBuf> = (0..OWED_MAX * 3)
            .map(|i| dir.path().join(format!("f{i}")))
            .collect();
        for path in &files {
            let f = File::create(path).expect("file");
            sync(&f, "syncing", path).expect("owed");
        }
        // Other tests of this process open descriptors too: a margin.
        assert!(
            open_fds() < before + OWED_MAX + 64,
            "{} descriptors open, {before} before",
            open_fds()
        );
        // Owed after the early syncs, the folder waits for the commit.
        let d = File::open(dir.path()).expect("dir");
        sync(&d, "syncing directory", dir.path()).expect("owed");
        let owed = OWED.with(|o| o.borrow().as_ref().map(|o| o.handles.len()));
        assert!(owed.is_some_and(|n| (1..OWED_MAX).contains(&n)), "{owed:?}");
        assert!(group.commit().expect("committed") >= 1);
        assert!(OWED.with(|o| o.borrow().is_none()));
        assert!(open_fds() < before + 64, "every owed descriptor was closed");
    }
}
