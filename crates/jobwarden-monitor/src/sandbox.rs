//! A job's sandbox: what a job's local commands may touch of the root.
//!
//! A job runs as the daemon's user, so no permission bit keeps it away
//! from the root. Its commands therefore run in namespaces of their own
//! (`child/enter.rs` makes them, `child/init.rs` is their first process):
//!
//! - a **mount namespace** in which the whole root is read-only except
//!   the job's workdir (when it is below the root), its run folder's
//!   `affected` (which the job writes into, and may not replace), and the
//!   inbox (a job may drop follow-up prompts: `jobwarden submit` works);
//!   the rest of the machine (a repository, `$HOME`, the network) is as it
//!   was;
//! - a **pid namespace** whose first process is the sandbox's init: when
//!   it or the monitor dies, the kernel kills every process of the job,
//!   whatever it did to leave its process group or session;
//! - as a user other than root, an unprivileged **user namespace** that
//!   maps the user to itself (the job keeps its uid and its files); as
//!   root, none (root can make the others), and the job loses
//!   `CAP_SYS_ADMIN`, which could undo the read-only mount.
//!
//! Whether this machine allows it is found once per monitor ([`state`]),
//! by a child that enters a sandbox and exits: where the kernel or its
//! policy refuses unprivileged namespaces, jobs run as before and the
//! `limits` event says why. A profile may turn it off (`sandbox = false`).

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::fcntl::OFlag;
use nix::unistd::pipe2;

use super::spawn::NotStarted;
use jobwarden_model::job::JobId;
use jobwarden_model::layout::Layout;
use jobwarden_sys::child::init::InitLink;
use jobwarden_sys::child::{Enter, Hole, Sandboxed, enter_for};
pub use jobwarden_sys::child::{State, available, state};
use jobwarden_sys::fsio;

/// One command's sandbox, prepared before its spawn.
pub struct Prepared {
    enter: Enter,
    report: (OwnedFd, OwnedFd),
    death: (OwnedFd, OwnedFd),
    /// The job's `affected`, as made for the sandbox to bind.
    affected: Option<std::fs::File>,
}

impl Prepared {
    /// What the child needs of it.
    pub fn sandboxed(&self) -> Sandboxed<'_> {
        Sandboxed {
            enter: &self.enter,
            init_fds: [self.report.1.as_raw_fd(), self.death.0.as_raw_fd()],
        }
    }

    /// The job's `affected` file, opened when it was made: the file the
    /// sandbox binds, which the job may write and cannot replace (its run
    /// folder is read-only to it), so that its list is read through this
    /// handle at the end.
    pub fn take_affected(&mut self) -> Option<std::fs::File> {
        self.affected.take()
    }

    /// Once the child runs the init: the monitor's side of its pipes
    /// (the child's side closed here, so that the monitor sees the init's
    /// end), after the init said the command executes.
    pub fn started(self) -> std::io::Result<InitLink> {
        let Prepared { report, death, .. } = self;
        drop(report.1);
        drop(death.0);
        let link = InitLink::new(report.0, death.1);
        link.ready()?;
        Ok(link)
    }
}

/// Prepare the sandbox of a command of job `id`, whose workdir is
/// `workdir`: the folder it may write made (see
/// [`Layout::sandbox_workdir`]), `affected` made, the pipes made.
pub fn prepare(layout: &Layout, id: &JobId, workdir: &Path) -> Result<Prepared, NotStarted> {
    let root = layout.root();
    let mut holes = Vec::new();
    if let Some(dir) = layout
        .sandbox_workdir(id, workdir)
        .map_err(|why| NotStarted::Setup(format!("{why}; a sandboxed job may not write there: choose another workdir, or set sandbox = false in its profile")))?
    {
        // The job's own workdir the monitor made before its first stage;
        // another is made here (a prepare may create the workdir in it).
        if dir != layout.job_workdir(id) {
            fsio::create_dirs(root, &dir).map_err(|e| NotStarted::Other(e.to_string()))?;
        }
        holes.push(hole_of(root, &dir, true, true)?);
    }
    let affected_path = layout.affected_list(id);
    let affected = fsio::open_append(root, &affected_path).ok();
    if affected.is_some() {
        holes.push(hole_of(root, &affected_path, false, false)?);
    }
    holes.push(hole_of(root, &layout.inbox(), true, false)?);
    let enter = enter_for(root, holes).map_err(|e| NotStarted::Other(e.to_string()))?;
    let pipe = || pipe2(OFlag::O_CLOEXEC).map_err(|e| NotStarted::Other(format!("pipe: {e}")));
    Ok(Prepared {
        enter,
        report: pipe()?,
        death: pipe()?,
        affected,
    })
}

/// `path` (below `root`) as a hole of the sandbox.
fn hole_of(root: &Path, path: &Path, dir: bool, required: bool) -> Result<Hole, NotStarted> {
    let rel = path.strip_prefix(root).map_err(|_| {
        NotStarted::Other(format!(
            "{} is not below the root {}",
            path.display(),
            root.display()
        ))
    })?;
    let components = rel
        .components()
        .map(|c| CString::new(c.as_os_str().as_bytes()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| NotStarted::Setup(format!("{} holds a NUL byte", path.display())))?;
    Ok(Hole::new(components, dir, required))
}
