//! A job's sandbox: what a job's local commands may touch of the root.
//!
//! A job runs as the daemon's user, so no permission bit keeps it away
//! from the root. Its commands therefore run in namespaces of their own
//! (`enter.rs` makes them, `init.rs` is their first process):
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
use std::sync::OnceLock;

use nix::fcntl::OFlag;
use nix::unistd::pipe2;

use super::enter::{Enter, Hole, IdMaps};
use super::init::InitLink;
use super::process::{self, Sandboxed};
use super::spawn::NotStarted;
use crate::fsio;
use crate::job::JobId;
use crate::layout::Layout;

/// Whether a job's commands run sandboxed, as its `limits` event says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// In namespaces of their own.
    On,
    /// The profile says `sandbox = false`.
    Off,
    /// The machine refuses (why).
    Unavailable(String),
}

impl State {
    /// As the `limits` event and `status` name it.
    pub fn name(&self) -> &'static str {
        match self {
            State::On => "namespaces",
            State::Off => "off",
            State::Unavailable(_) => "unavailable",
        }
    }

    /// Why there is no sandbox, where the machine refused one.
    pub fn why_not(&self) -> Option<&str> {
        match self {
            State::Unavailable(why) => Some(why),
            State::On | State::Off => None,
        }
    }
}

/// The sandbox a job with `wanted` gets on this machine under `layout`.
pub fn state(layout: &Layout, wanted: bool) -> State {
    if !wanted {
        return State::Off;
    }
    match available(layout) {
        Ok(()) => State::On,
        Err(why) => State::Unavailable(why.clone()),
    }
}

/// Whether this machine lets a child enter a sandbox of `layout`'s root:
/// tried once per process.
pub fn available(layout: &Layout) -> &'static Result<(), String> {
    static FOUND: OnceLock<Result<(), String>> = OnceLock::new();
    FOUND.get_or_init(|| {
        let enter = enter_for(layout.root(), Vec::new()).map_err(|e| e.to_string())?;
        process::probe(&enter).map_err(|e| e.to_string())
    })
}

/// One command's sandbox, prepared before its spawn.
pub struct Prepared {
    enter: Enter,
    report: (OwnedFd, OwnedFd),
    death: (OwnedFd, OwnedFd),
}

impl Prepared {
    /// What the child needs of it.
    pub fn sandboxed(&self) -> Sandboxed<'_> {
        Sandboxed {
            enter: &self.enter,
            init_fds: [self.report.1.as_raw_fd(), self.death.0.as_raw_fd()],
        }
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
    let affected = layout.affected_list(id);
    if fsio::open_append(root, &affected).is_ok() {
        holes.push(hole_of(root, &affected, false, false)?);
    }
    holes.push(hole_of(root, &layout.inbox(), true, false)?);
    let enter = enter_for(root, holes).map_err(|e| NotStarted::Other(e.to_string()))?;
    let pipe = || pipe2(OFlag::O_CLOEXEC).map_err(|e| NotStarted::Other(format!("pipe: {e}")));
    Ok(Prepared {
        enter,
        report: pipe()?,
        death: pipe()?,
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

/// The sandbox of the root at `root` with `holes`, as this process's user.
fn enter_for(root: &Path, holes: Vec<Hole>) -> std::io::Result<Enter> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(root)?;
    let vfs = nix::sys::statvfs::statvfs(root)?;
    let euid = nix::unistd::geteuid();
    let id_maps = (!euid.is_root()).then(|| {
        let egid = nix::unistd::getegid();
        IdMaps {
            uid_map: CString::new(format!("{euid} {euid} 1\n")).unwrap_or_default(),
            gid_map: CString::new(format!("{egid} {egid} 1\n")).unwrap_or_default(),
        }
    });
    Ok(Enter {
        id_maps,
        root: CString::new(root.as_os_str().as_bytes())?,
        root_id: (meta.dev() as libc::dev_t, meta.ino() as libc::ino_t),
        holes,
        keep_flags: kept_flags(vfs.flags()),
        drop_sys_admin: euid.is_root(),
    })
}

/// The mount flags of the root's mount that a read-only remount of it
/// must keep (in a user namespace the kernel refuses to change them).
fn kept_flags(flags: nix::sys::statvfs::FsFlags) -> libc::c_ulong {
    use nix::sys::statvfs::FsFlags;
    [
        (FsFlags::ST_NOSUID, libc::MS_NOSUID),
        (FsFlags::ST_NODEV, libc::MS_NODEV),
        (FsFlags::ST_NOEXEC, libc::MS_NOEXEC),
        (FsFlags::ST_NOATIME, libc::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, libc::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, libc::MS_RELATIME),
    ]
    .into_iter()
    .filter(|(st, _)| flags.contains(*st))
    .fold(0, |all, (_, ms)| all | ms)
}
