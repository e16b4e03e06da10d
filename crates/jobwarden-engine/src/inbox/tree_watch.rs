//! A folder and every folder below it, watched on one inotify instance of
//! the daemon's own and read on its runtime: the inbox (and `control/`).
//!
//! Only what the daemon acts on is asked of the kernel: a file closed after
//! writing or moved in, a name created (a folder, a symlink), and, under
//! `control/`, a name removed or moved away; the watched top folder's own
//! removal or move. Opens, reads, attribute changes and each write are not
//! reported, so a claim's own open, rename and link of the prompt raise
//! one event (the rename's), not a dozen read by a thread of their own.
//!
//! A folder created or moved in below is watched before it is told
//! ([`Signal::Folder`]), so that the daemon's scan of it, which follows,
//! misses nothing written there meanwhile. Folders that are symlinks are
//! never followed. A lost event (the kernel's queue overflowed, a watch
//! that could not be added) is told as [`Signal::Lost`]: the daemon
//! rescans.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InotifyEvent, WatchDescriptor};
use tokio::io::unix::AsyncFd;
use tokio::sync::mpsc::UnboundedSender;

use super::Signal;
use jobwarden_model::layout::{Layout, is_claimed_name};
use jobwarden_sys::fsio;
use jobwarden_sys::inotify::{InotifyFd, async_inotify};

/// Which tree a watched folder belongs to: what its events mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tree {
    Inbox,
    Control,
}

/// A watched folder: where it is, which tree, and whether it is the top.
struct Watched {
    path: PathBuf,
    tree: Tree,
    top: bool,
}

type Table = HashMap<WatchDescriptor, Watched>;

/// The watches; dropping it ends the reader task and closes the instance.
pub struct TreeWatch {
    reader: tokio::task::JoinHandle<()>,
}

impl TreeWatch {
    /// Watch `inbox` and every folder below it, and, best effort,
    /// `control` likewise; signals are sent on `tx`. Must be called within
    /// the runtime. An error when the instance or the inbox's own watch
    /// cannot be had.
    pub fn start(
        layout: &Layout,
        inbox: &Path,
        control: &Path,
        tx: UnboundedSender<Signal>,
    ) -> std::io::Result<Self> {
        let mut watcher = Watcher {
            root: layout.root().to_path_buf(),
            fd: async_inotify()?,
            table: Table::new(),
            tx,
        };
        watcher.add(inbox, Tree::Inbox, true)?;
        watcher.add_below(inbox, Tree::Inbox);
        match watcher.add(control, Tree::Control, true) {
            Ok(()) => watcher.add_below(control, Tree::Control),
            Err(e) => tracing::debug!(
                "not watching {}: {e}; pause markers are read on the tick",
                control.display()
            ),
        }
        let reader = tokio::spawn(watcher.read());
        Ok(TreeWatch { reader })
    }
}

impl Drop for TreeWatch {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// The instance and its watches, owned by the reader task once started.
struct Watcher {
    /// The root the watched folders are under: they are listed through
    /// its handle (`fsio::read_dir`), never through a symlink.
    root: PathBuf,
    fd: AsyncFd<InotifyFd>,
    table: Table,
    tx: UnboundedSender<Signal>,
}

impl Watcher {
    /// Watch the folder `dir` (never through a symlink).
    fn add(&mut self, dir: &Path, tree: Tree, top: bool) -> std::io::Result<()> {
        let mut flags = AddWatchFlags::IN_CLOSE_WRITE
            | AddWatchFlags::IN_MOVED_TO
            | AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_MOVED_FROM
            | AddWatchFlags::IN_ONLYDIR
            | AddWatchFlags::IN_DONT_FOLLOW;
        if tree == Tree::Control {
            flags |= AddWatchFlags::IN_DELETE | AddWatchFlags::IN_MODIFY;
        }
        if top {
            flags |= AddWatchFlags::IN_DELETE_SELF | AddWatchFlags::IN_MOVE_SELF;
        }
        let wd = self.fd.get_ref().0.add_watch(dir, flags)?;
        let path = dir.to_path_buf();
        self.table.insert(wd, Watched { path, tree, top });
        Ok(())
    }

    /// Watch every real folder below `dir`. One that cannot be watched is
    /// told as lost (the daemon rescans; it is then found by the scan).
    fn add_below(&mut self, dir: &Path, tree: Tree) {
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            let Ok(entries) = fsio::read_dir(&self.root, &d) else {
                continue;
            };
            for entry in entries.flatten() {
                // `file_type` does not follow a symlink.
                if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let sub = d.join(entry.file_name());
                match self.add(&sub, tree, false) {
                    Ok(()) => stack.push(sub),
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                    Err(e) => self.lost(format!("watching {}: {e}", sub.display())),
                }
            }
        }
    }

    fn lost(&self, why: String) {
        let _ = self.tx.send(Signal::Lost(why));
    }

    /// Read events until the instance fails or the receiver is gone.
    async fn read(mut self) {
        loop {
            let Ok(mut guard) = self.fd.readable().await else {
                return;
            };
            let events = match guard.get_inner().0.read_events() {
                Ok(events) => events,
                Err(Errno::EAGAIN) => {
                    guard.clear_ready();
                    continue;
                }
                Err(e) => {
                    self.lost(format!("reading the inbox's watch: {e}"));
                    return;
                }
            };
            drop(guard);
            for event in events {
                for signal in self.translate(event) {
                    if self.tx.send(signal).is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// What `event` tells the daemon (after watching a new folder).
    fn translate(&mut self, event: InotifyEvent) -> Vec<Signal> {
        let mask = event.mask;
        if mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
            return vec![Signal::Lost("inotify queue overflowed".into())];
        }
        if mask.contains(AddWatchFlags::IN_IGNORED) {
            // The folder is gone (or moved away): the kernel dropped it.
            self.table.remove(&event.wd);
            return Vec::new();
        }
        let Some(w) = self.table.get(&event.wd) else {
            return Vec::new();
        };
        let (tree, top, dir) = (w.tree, w.top, w.path.clone());
        if top && mask.contains(AddWatchFlags::IN_DELETE_SELF) {
            return match tree {
                Tree::Inbox => vec![Signal::InboxGone("deleted")],
                Tree::Control => vec![Signal::Control],
            };
        }
        if top && mask.contains(AddWatchFlags::IN_MOVE_SELF) {
            return match tree {
                Tree::Inbox => vec![Signal::InboxGone("moved away")],
                Tree::Control => vec![Signal::Control],
            };
        }
        let Some(name) = event.name else {
            return Vec::new();
        };
        let path = dir.join(name);
        let is_dir = mask.contains(AddWatchFlags::IN_ISDIR);
        if is_dir && mask.contains(AddWatchFlags::IN_MOVED_FROM) {
            // A folder moved elsewhere keeps its watches under its old
            // paths: drop them (one moved back in is watched again).
            self.forget_below(&path);
            return match tree {
                Tree::Control => vec![Signal::Control],
                Tree::Inbox => Vec::new(),
            };
        }
        if is_dir && mask.intersects(AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO) {
            match self.add(&path, tree, false) {
                Ok(()) => self.add_below(&path, tree),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Vec::new(),
                Err(e) => self.lost(format!("watching {}: {e}", path.display())),
            }
            return match tree {
                Tree::Inbox => vec![Signal::Folder(path)],
                Tree::Control => vec![Signal::Control],
            };
        }
        if tree == Tree::Control {
            return vec![Signal::Control];
        }
        inbox_file(mask, path)
    }

    /// Drop the watches of `dir` and of every folder below it.
    fn forget_below(&mut self, dir: &Path) {
        let gone: Vec<WatchDescriptor> = self
            .table
            .iter()
            .filter(|(_, w)| w.path.starts_with(dir))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in gone {
            self.table.remove(&wd);
            let _ = self.fd.get_ref().0.rm_watch(wd);
        }
    }
}

/// What an event on a file (not a folder) in the inbox tells: a prompt
/// complete (moved in, or closed after writing), or a symlink made (the
/// daemon refuses it, saying why). A file merely created may still be
/// being written: its close follows. A claim's own rename is nothing.
fn inbox_file(mask: AddWatchFlags, path: PathBuf) -> Vec<Signal> {
    let complete = if mask.intersects(AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_CLOSE_WRITE) {
        !is_claimed_name(&path)
    } else {
        mask.contains(AddWatchFlags::IN_CREATE)
            && std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink())
    };
    if complete {
        vec![Signal::Complete(path)]
    } else {
        Vec::new()
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // fixtures
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::sync::mpsc;

    async fn next(rx: &mut mpsc::UnboundedReceiver<Signal>) -> Signal {
        tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("a signal within 10 s")
            .expect("the channel is open")
    }

    #[tokio::test]
    async fn files_folders_and_the_inbox_itself_are_told() {
        let dir = tempfile::tempdir().expect("tempdir");
        let layout = Layout::new(dir.path().to_path_buf());
        let (inbox, control) = (layout.inbox(), layout.control());
        std::fs::create_dir_all(inbox.join("p")).expect("inbox");
        std::fs::create_dir_all(&control).expect("control");
        let (tx, mut rx) = mpsc::unbounded_channel();
        let _watch = TreeWatch::start(&layout, &inbox, &control, tx).expect("watch");

        // Written in place below the top: told at its close, once.
        std::fs::write(inbox.join("p/a.prompt.md"), "x").expect("write");
        assert!(matches!(next(&mut rx).await, Signal::Complete(p) if p.ends_with("p/a.prompt.md")));
        // A claim's own rename is not told; a drop by rename is.
        std::fs::rename(inbox.join("p/a.prompt.md"), inbox.join("p/a.running.md")).expect("mv");
        std::fs::write(dir.path().join("b.prompt.md"), "x").expect("write");
        std::fs::rename(dir.path().join("b.prompt.md"), inbox.join("p/b.prompt.md")).expect("mv");
        assert!(matches!(next(&mut rx).await, Signal::Complete(p) if p.ends_with("p/b.prompt.md")));
        // A new folder is watched before it is told: a file written in it
        // right after is told too.
        std::fs::create_dir(inbox.join("q")).expect("mkdir");
        assert!(matches!(next(&mut rx).await, Signal::Folder(p) if p.ends_with("q")));
        std::fs::write(inbox.join("q/c.prompt.md"), "x").expect("write");
        assert!(matches!(next(&mut rx).await, Signal::Complete(p) if p.ends_with("q/c.prompt.md")));
        // A symlink is told as made (the daemon refuses it).
        std::os::unix::fs::symlink("/etc/passwd", inbox.join("q/l.prompt.md")).expect("ln");
        assert!(matches!(next(&mut rx).await, Signal::Complete(p) if p.ends_with("q/l.prompt.md")));
        // A marker written, then removed, under control/: each a change
        // there (a write is told at its creation and its close).
        std::fs::write(control.join("pause"), "").expect("write");
        assert!(matches!(next(&mut rx).await, Signal::Control));
        assert!(matches!(next(&mut rx).await, Signal::Control));
        std::fs::remove_file(control.join("pause")).expect("rm");
        assert!(matches!(next(&mut rx).await, Signal::Control));
        // The inbox moved away.
        std::fs::rename(&inbox, dir.path().join("old-inbox")).expect("mv");
        assert!(matches!(
            next(&mut rx).await,
            Signal::InboxGone("moved away")
        ));
        assert!(rx.try_recv().is_err(), "nothing more was told");
    }

    #[tokio::test]
    async fn a_folder_moved_in_is_watched_with_its_subfolders() {
        let dir = tempfile::tempdir().expect("tempdir");
        let layout = Layout::new(dir.path().to_path_buf());
        let (inbox, control) = (layout.inbox(), layout.control());
        std::fs::create_dir_all(&inbox).expect("inbox");
        std::fs::create_dir_all(dir.path().join("staged/deep")).expect("staged");
        let (tx, mut rx) = mpsc::unbounded_channel();
        let _watch = TreeWatch::start(&layout, &inbox, &control, tx).expect("watch");
        std::fs::rename(dir.path().join("staged"), inbox.join("proj")).expect("mv");
        assert!(matches!(next(&mut rx).await, Signal::Folder(p) if p.ends_with("proj")));
        std::fs::write(inbox.join("proj/deep/d.prompt.md"), "x").expect("write");
        assert!(
            matches!(next(&mut rx).await, Signal::Complete(p) if p.ends_with("proj/deep/d.prompt.md"))
        );
    }
}
