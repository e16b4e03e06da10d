//! A job's own cgroup v2, where the service manager delegated a subtree:
//! exact membership, `memory.max` and `pids.max`, the OOM killer's count,
//! and `cgroup.kill` to end everything in it at once. This module knows the
//! cgroup file system (the only paths outside the root jobwarden builds);
//! the monitor decides when to use it.
//!
//! The layout it expects: the daemon (and so every monitor, which inherits
//! its cgroup) runs in a leaf named `supervisor` of the delegated cgroup,
//! which itself holds no process. Jobs' cgroups are `supervisor`'s
//! siblings (`job-<job_id>`), so the "no internal processes" rule holds and
//! controllers can be enabled for them. systemd makes it with
//! `Delegate=yes` and `DelegateSubgroup=supervisor` (systemd 254). With
//! `Delegate=yes` alone, systemd starts the daemon in the delegated cgroup
//! itself, and the daemon moves into the leaf at start
//! ([`take_supervisor_leaf`]); the controllers are then left off, since
//! systemd could not place the next daemon in a cgroup that has them on
//! while jobs still run. Anywhere else (no cgroup v2, not delegated, a
//! daemon started by hand in a shared cgroup) nothing here is used and the
//! monitor falls back to rlimits and its process tree.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::unistd::{AccessFlags, access};

/// The leaf the daemon and its monitors live in.
pub const SUPERVISOR_LEAF: &str = "supervisor";

/// Controllers a job's cgroup uses when the kernel offers them: `memory`
/// (`memory.max`, the OOM count in `memory.events`), `pids` (`pids.max`).
const CONTROLLERS: [&str; 2] = ["memory", "pids"];

/// One job's cgroup, created for it and removed after it.
#[derive(Debug)]
pub struct JobCgroup {
    dir: PathBuf,
    /// `cgroup.procs`, opened before the fork: the child writes itself into
    /// it between fork and exec (a write is async-signal-safe, an open of
    /// a path is not guaranteed to be).
    procs: File,
    /// Limits set in it, and those that could not be (with why).
    pub applied: Vec<String>,
    pub not_applied: Vec<String>,
}

/// The limits a job's cgroup should enforce.
#[derive(Debug, Clone, Copy, Default)]
pub struct CgroupLimits {
    pub memory_max: Option<u64>,
    pub pids_max: Option<u64>,
}

impl JobCgroup {
    /// Create the cgroup of job `name` (`job-<name>`) next to this
    /// process's `supervisor` leaf, with `limits`; or say why there is none.
    pub fn create(name: &str, limits: CgroupLimits) -> Result<JobCgroup, String> {
        let own = own_cgroup()?;
        let base = delegated_base(&own)?;
        let not_enabled = match std::env::var_os(NO_CONTROLLERS_ENV) {
            Some(_) => vec![format!(
                "controllers are left off in {}: the daemon moved itself into its {SUPERVISOR_LEAF} \
                 leaf (Delegate=yes without DelegateSubgroup={SUPERVISOR_LEAF}, which needs systemd 254), \
                 and systemd could not start the next daemon in a cgroup with controllers on while jobs run",
                base.display()
            )],
            None => enable_controllers(&base),
        };
        let dir = base.join(format!("job-{name}"));
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if populated(&dir) != Some(false) {
                    return Err(format!(
                        "{} already exists and still holds processes (of an earlier monitor of this job)",
                        dir.display()
                    ));
                }
            }
            Err(e) => return Err(format!("creating {}: {e}", dir.display())),
        }
        let procs = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(dir.join("cgroup.procs"))
            .map_err(|e| format!("opening {}/cgroup.procs: {e}", dir.display()))?;
        let mut cg = JobCgroup {
            dir,
            procs,
            applied: Vec::new(),
            not_applied: not_enabled,
        };
        cg.set("memory.max", limits.memory_max);
        cg.set("pids.max", limits.pids_max);
        Ok(cg)
    }

    /// The cgroup's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The descriptor of its `cgroup.procs`, for the child to write `0`
    /// (itself) to before it runs the job's program.
    pub fn procs_fd(&self) -> RawFd {
        self.procs.as_raw_fd()
    }

    /// Write `value` to the cgroup's `file`, noting whether it took.
    fn set(&mut self, file: &str, value: Option<u64>) {
        let Some(value) = value else { return };
        let path = self.dir.join(file);
        match OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|mut f| f.write_all(value.to_string().as_bytes()))
        {
            Ok(()) => self.applied.push(format!("{file}={value}")),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => self
                .not_applied
                .push(format!("{file}: its controller is not enabled here")),
            Err(e) => self.not_applied.push(format!("{file}: {e}")),
        }
    }

    /// Processes the OOM killer killed in this cgroup so far
    /// (`memory.events` `oom_kill`); `None` without the memory controller.
    pub fn oom_kills(&self) -> Option<u64> {
        let text = std::fs::read_to_string(self.dir.join("memory.events")).ok()?;
        keyed(&text, "oom_kill")
    }

    /// Does any live process remain in it?
    pub fn is_populated(&self) -> bool {
        populated(&self.dir).unwrap_or(false)
    }

    /// SIGKILL everything in it: `cgroup.kill` (Linux 5.14), else each
    /// member listed in `cgroup.procs`. Returns whether `cgroup.kill` did it.
    pub fn kill(&self) -> bool {
        let killed = OpenOptions::new()
            .write(true)
            .open(self.dir.join("cgroup.kill"))
            .and_then(|mut f| f.write_all(b"1"))
            .is_ok();
        if !killed {
            for pid in self.members() {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        killed
    }

    /// The pids in it (its own level; a job does not get to make children).
    pub fn members(&self) -> Vec<i32> {
        std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// Remove the (empty) cgroup. The kernel keeps nothing of it: its
    /// counts were read before.
    pub fn remove(&self) -> std::io::Result<()> {
        match std::fs::remove_dir(&self.dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }
}

/// Set for the monitors of a daemon that moved itself into its
/// `supervisor` leaf: their jobs' cgroups get no controllers.
pub const NO_CONTROLLERS_ENV: &str = "JOBWARDEN_CGROUP_NO_CONTROLLERS";

/// Where the daemon found itself at start.
#[derive(Debug, PartialEq, Eq)]
pub enum Leaf {
    /// In a `supervisor` leaf already (systemd's `DelegateSubgroup=`).
    Placed(PathBuf),
    /// In a delegated cgroup, and now in its `supervisor` leaf.
    Moved(PathBuf),
    /// Not in a delegated cgroup, or the move failed: why.
    None(String),
}

/// At the daemon's start, before any monitor: a daemon systemd started in
/// a delegated cgroup (`Delegate=yes`, marked with the `user.delegate` or
/// `trusted.delegate` attribute) moves into that cgroup's `supervisor`
/// leaf, made if missing, so that jobs get cgroups of their own beside it.
/// Only a cgroup systemd marked delegated is touched: a daemon run by hand
/// (root can write any cgroup) stays where it is.
pub fn take_supervisor_leaf() -> Leaf {
    let own = match find_own_cgroup() {
        Ok(own) => own,
        Err(why) => return Leaf::None(why),
    };
    if own.file_name().is_some_and(|n| n == SUPERVISOR_LEAF) {
        return Leaf::Placed(own);
    }
    if !is_marked_delegated(&own) {
        return Leaf::None(format!(
            "this process's cgroup {} is not delegated to it (systemd: Delegate=yes)",
            own.display()
        ));
    }
    let leaf = own.join(SUPERVISOR_LEAF);
    let moved = match std::fs::create_dir(&leaf) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
        _ => OpenOptions::new()
            .write(true)
            .open(leaf.join("cgroup.procs"))
            .and_then(|mut f| f.write_all(b"0")),
    };
    match moved {
        Ok(()) => Leaf::Moved(leaf),
        Err(e) => Leaf::None(format!("moving into {}: {e}", leaf.display())),
    }
}

/// Did systemd mark cgroup `dir` as delegated?
fn is_marked_delegated(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    ["user.delegate", "trusted.delegate"].iter().any(|name| {
        let Ok(name) = std::ffi::CString::new(*name) else {
            return false;
        };
        let mut value = [0u8; 8];
        // SAFETY: both names are NUL-terminated; the buffer's length is
        // passed with it.
        let n = unsafe {
            libc::getxattr(
                path.as_ptr(),
                name.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        n > 0 && value.get(..n as usize) == Some(b"1".as_slice())
    })
}

/// This process's cgroup v2 folder, found once (see [`find_own_cgroup`]).
/// A spare monitor finds it before its job arrives ([`warm`]).
fn own_cgroup() -> Result<PathBuf, String> {
    static OWN: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    OWN.get_or_init(find_own_cgroup).clone()
}

/// Find what a job's cgroup needs ahead of the job.
pub fn warm() {
    let _ = own_cgroup();
}

/// This process's cgroup v2 folder: the `0::` line of `/proc/self/cgroup`
/// under the mount point of the cgroup2 file system.
fn find_own_cgroup() -> Result<PathBuf, String> {
    let text = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("reading /proc/self/cgroup: {e}"))?;
    let path = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or("no cgroup v2 membership in /proc/self/cgroup")?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("reading /proc/self/mountinfo: {e}"))?;
    let (root, mount) = cgroup2_mount(&mountinfo).ok_or("no cgroup2 file system is mounted")?;
    let rel = Path::new(path.trim())
        .strip_prefix(&root)
        .map_err(|_| format!("cgroup {path} is outside the mounted cgroup2 tree ({root})"))?;
    Ok(Path::new(&mount).join(rel))
}

/// `(root, mount point)` of the first cgroup2 mount in `mountinfo`.
fn cgroup2_mount(mountinfo: &str) -> Option<(String, String)> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        if right.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        let mut f = left.split_whitespace().skip(3);
        Some((f.next()?.to_owned(), f.next()?.to_owned()))
    })
}

/// The delegated cgroup whose `supervisor` leaf `own` is, if we may
/// create cgroups in it.
fn delegated_base(own: &Path) -> Result<PathBuf, String> {
    let leaf = own.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let base = match own.parent() {
        Some(base) if leaf == SUPERVISOR_LEAF => base,
        _ => {
            return Err(format!(
                "this process's cgroup {} is not a {SUPERVISOR_LEAF:?} leaf of a delegated cgroup (systemd: Delegate=yes)",
                own.display()
            ));
        }
    };
    for file in ["cgroup.procs", "cgroup.subtree_control"] {
        access(&base.join(file), AccessFlags::W_OK)
            .map_err(|e| format!("{} is not writable: {e}", base.join(file).display()))?;
    }
    Ok(base.to_owned())
}

/// Enable the [`CONTROLLERS`] the kernel offers in `base` for its children.
/// Returns what could not be enabled, and why.
fn enable_controllers(base: &Path) -> Vec<String> {
    let read = |f: &str| std::fs::read_to_string(base.join(f)).unwrap_or_default();
    let (available, enabled) = (read("cgroup.controllers"), read("cgroup.subtree_control"));
    let has = |list: &str, c: &str| list.split_whitespace().any(|x| x == c);
    let mut missing = Vec::new();
    for c in CONTROLLERS.iter().filter(|c| !has(&enabled, c)) {
        if !has(&available, c) {
            missing.push(format!(
                "controller {c} is not available in {}",
                base.display()
            ));
            continue;
        }
        let wrote = OpenOptions::new()
            .write(true)
            .open(base.join("cgroup.subtree_control"))
            .and_then(|mut f| f.write_all(format!("+{c}").as_bytes()));
        if let Err(e) = wrote {
            missing.push(format!(
                "enabling controller {c} in {}: {e}",
                base.display()
            ));
        }
    }
    missing
}

/// `populated` of a cgroup's `cgroup.events`.
fn populated(dir: &Path) -> Option<bool> {
    let text = std::fs::read_to_string(dir.join("cgroup.events")).ok()?;
    keyed(&text, "populated").map(|n| n != 0)
}

/// The value of `key` in a flat keyed file (`key value` lines).
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_cgroup2_mount_in_a_hybrid_layout() {
        let info = "30 25 0:26 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n\
                    41 30 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup2_mount(info),
            Some(("/".to_owned(), "/sys/fs/cgroup/unified".to_owned()))
        );
        assert_eq!(cgroup2_mount("30 25 0:26 / /x rw - tmpfs tmpfs rw\n"), None);
    }

    #[test]
    fn reads_keyed_files() {
        let events = "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n";
        assert_eq!(keyed(events, "oom_kill"), Some(2));
        assert_eq!(keyed(events, "oom"), Some(1));
        assert_eq!(keyed(events, "missing"), None);
    }

    #[test]
    fn a_folder_systemd_did_not_mark_is_not_delegated() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(!is_marked_delegated(dir.path()));
        assert!(!is_marked_delegated(Path::new("/nonexistent/cgroup")));
    }

    #[test]
    fn only_a_supervisor_leaf_counts_as_delegated() {
        let err = delegated_base(Path::new("/sys/fs/cgroup/user.slice/session-1.scope"))
            .expect_err("not a supervisor leaf");
        assert!(err.contains("Delegate=yes"), "{err}");
        assert!(delegated_base(Path::new("/")).is_err());
    }
}
