//! Facts about processes read from `/proc`: start times, states, command
//! lines, executables, lock holders, descendants, CPU time. The proofs that
//! a process is a root's monitor or daemon are built on these
//! (`jobwarden`'s `proof` module); this module knows no root.
//!
//! A pid read from a file proves nothing: a job can write any file under
//! the root, and pids are recycled. What the kernel says about a process
//! can be trusted. A **job's process group**, once its monitor is gone, is
//! proven by [`job_group`]: its members are in the monitor's session and
//! were started with `JOBWARDEN_JOB_ID=<job_id>` in their environment. The
//! kernel hands neither a group's id nor a session's id to anyone else
//! while a member lives, so one proven member makes the group ours. A
//! member already dying (inside `exit`, or with a SIGKILL pending) has lost
//! its environment with its memory: it is set apart, waited for and never
//! signalled (`procfs/group.rs`).
//!
//! A process's start time with its pid identifies it for good: a recycled
//! pid has another start.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use nix::sys::resource::{Resource, getrlimit, setrlimit};
use serde::{Deserialize, Serialize};

mod group;
mod locks;
mod tree;

#[cfg(test)]
use group::environ_has;
pub use group::{Group, job_group};
pub use locks::{flock_holder, flock_holders};
pub use tree::{cpu_time, descendants, reap_counting_cpu};

/// One process for good: its pid and its start time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proc {
    pub pid: i32,
    /// Clock ticks since boot (`/proc/<pid>/stat` field 22).
    pub start_time: u64,
}

impl Proc {
    /// Is this very process still alive (not exited, not a zombie)?
    pub fn is_alive(self) -> bool {
        stat(self.pid).is_some_and(|s| s.start_time == self.start_time && s.is_live())
    }
}

/// The identity of an executable file: its device and inode. A binary
/// replaced by rename keeps running from its old inode, which this names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExeId {
    pub dev: u64,
    pub ino: u64,
}

/// The executable `pid` runs, by identity (`/proc/<pid>/exe`, which leads
/// to the file even once it was deleted or replaced).
pub fn exe_id(pid: i32) -> Option<ExeId> {
    let meta = std::fs::metadata(format!("/proc/{pid}/exe")).ok()?;
    Some(ExeId {
        dev: meta.dev(),
        ino: meta.ino(),
    })
}

/// This process's pid, asked once (for a process running its own
/// program: a forked child that has not executed anything must not ask).
pub fn own_pid() -> i32 {
    static OWN: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    *OWN.get_or_init(|| std::process::id() as i32)
}

/// The executable this process runs: asked once (it cannot change while
/// the process lives; a forked child runs the same one).
pub fn own_exe() -> Option<ExeId> {
    static OWN: std::sync::OnceLock<Option<ExeId>> = std::sync::OnceLock::new();
    *OWN.get_or_init(|| exe_id(own_pid()))
}

/// This process's start time (`/proc/self/stat`), asked once, as
/// [`own_exe`] (for a process running its own program: a forked child
/// that has not executed anything must not ask).
pub fn own_start_time() -> Option<u64> {
    static OWN: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *OWN.get_or_init(|| start_time(std::process::id() as i32))
}

/// What `/proc/<pid>/stat` says, as far as proofs need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub state: char,
    pub pgrp: i32,
    pub session: i32,
    /// The kernel's flags for the process (field 9).
    pub flags: u64,
    pub start_time: u64,
}

/// The kernel's flag for a process inside `exit` (`PF_EXITING`): it is
/// freeing what it held (a big process takes a while) and will not run
/// its own code again.
const PF_EXITING: u64 = 0x4;

impl Stat {
    /// Not a zombie, not dead.
    pub fn is_live(self) -> bool {
        !matches!(self.state, 'Z' | 'X')
    }

    fn is_exiting(self) -> bool {
        self.flags & PF_EXITING != 0
    }
}

/// `/proc/<pid>/stat`, parsed; `None` if there is no such process.
pub fn stat(pid: i32) -> Option<Stat> {
    if pid <= 0 {
        return None;
    }
    parse_stat(&read_small(&format!("/proc/{pid}/stat"))?)
}

/// A small `/proc` file in one read (the kernel makes the whole text anew
/// for each read, and reading to the end in growing steps asks it several
/// times), as text.
fn read_small(path: &str) -> Option<String> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).ok()?;
    let mut buf = vec![0; 1024];
    let n = file.read(&mut buf).ok()?;
    buf.truncate(n);
    if n == 1024 {
        file.read_to_end(&mut buf).ok()?;
    }
    // A process names itself: its name may be any bytes.
    Some(String::from_utf8_lossy(&buf).into_owned())
}

fn parse_stat(stat: &str) -> Option<Stat> {
    // The command name (field 2) is in parentheses and may hold spaces or
    // parentheses itself; fields after the last ')' are plain. `f[0]` is
    // field 3 (state).
    let f: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    Some(Stat {
        state: f.first()?.chars().next()?,
        pgrp: f.get(2)?.parse().ok()?,
        session: f.get(3)?.parse().ok()?,
        flags: f.get(6)?.parse().ok()?,
        start_time: f.get(19)?.parse().ok()?,
    })
}

/// Start time of `pid` in clock ticks since boot (`/proc/<pid>/stat` field
/// 22), or `None` if there is no such process.
pub fn start_time(pid: i32) -> Option<u64> {
    stat(pid).map(|s| s.start_time)
}

/// Is the process `pid` alive and the same one that started at `start`?
pub fn is_same_process(pid: i32, start: u64) -> bool {
    start_time(pid) == Some(start)
}

/// Is `pid` a live (not zombie) process?
pub fn is_running(pid: i32) -> bool {
    stat(pid).is_some_and(Stat::is_live)
}

/// Does `pid` run this program: the same file as ours, the one recorded,
/// or (an upgrade by rename) a deleted file that was at our path?
pub fn runs_this_program(pid: i32, recorded: Option<ExeId>) -> bool {
    let Some(theirs) = exe_id(pid) else {
        return false;
    };
    if Some(theirs) == own_exe() || Some(theirs) == recorded {
        return true;
    }
    let (Ok(link), Ok(ours)) = (
        std::fs::read_link(format!("/proc/{pid}/exe")),
        std::fs::read_link("/proc/self/exe"),
    ) else {
        return false;
    };
    let link = link.as_os_str().as_bytes();
    link.strip_suffix(b" (deleted)") == Some(ours.as_os_str().as_bytes())
}

/// The arguments of `pid` (`/proc/<pid>/cmdline`), split at NULs.
pub fn cmdline(pid: i32) -> Option<Vec<Vec<u8>>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let raw = raw.strip_suffix(b"\0").unwrap_or(&raw);
    Some(raw.split(|&b| b == 0).map(<[u8]>::to_vec).collect())
}

/// A process group started for a helper (git, a notification hook),
/// killed whole (SIGKILL) if this is dropped before [`GroupGuard::done`]:
/// at a deadline, or when the task waiting for it is cancelled (a daemon
/// shutting down), none of its processes outlives it.
#[derive(Debug)]
pub struct GroupGuard(Option<i32>);

impl GroupGuard {
    /// The group led by `pid` (a child started with `process_group(0)`).
    pub fn new(pid: Option<u32>) -> Self {
        GroupGuard(pid.and_then(|p| i32::try_from(p).ok()).filter(|&p| p > 0))
    }

    /// Its leader ended and was reaped: nothing to kill.
    pub fn done(mut self) {
        self.0 = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pgid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Does descriptor `fd` of `pid` hold an `flock`? Its `fdinfo` lists the
/// locks taken through it, whatever the file system says its device is.
pub fn holds_flock_by(pid: i32, fd: &std::ffi::OsStr) -> bool {
    let info = Path::new("/proc")
        .join(pid.to_string())
        .join("fdinfo")
        .join(fd);
    std::fs::read_to_string(info).is_ok_and(|text| {
        text.lines()
            .any(|l| l.starts_with("lock:") && l.contains(" FLOCK ") && !l.contains("->"))
    })
}

/// Every pid in `/proc`.
pub fn all_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
                .collect()
        })
        .unwrap_or_default()
}

/// A descriptor limit: soft, hard.
pub type FdLimit = (libc::rlim_t, libc::rlim_t);

/// Raise this process's soft limit on open descriptors to its hard limit
/// (a daemon holds two pipes per monitor, and a group commit some more);
/// the limit it started with, to give its children back (see
/// [`restore_fd_limit`]). `None` if the limits could not be read.
pub fn raise_fd_limit() -> Option<FdLimit> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft < hard
        && let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
    {
        tracing::debug!("raising the descriptor limit: {e}");
    }
    Some((soft, hard))
}

/// Put the descriptor limit back to `limit` (from [`raise_fd_limit`]), in
/// a child between fork and exec: its programs get the limit the service
/// was given, not the raised one. Async-signal-safe.
pub fn restore_fd_limit((soft, hard): FdLimit) -> std::io::Result<()> {
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).map_err(std::io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_start_time_is_stable_and_identifies_us() {
        let me = std::process::id() as i32;
        let t = start_time(me).expect("own /proc entry");
        assert!(is_same_process(me, t));
        assert!(!is_same_process(me, t + 1));
    }

    #[test]
    fn we_are_running_and_pid_zero_is_not() {
        assert!(is_running(std::process::id() as i32));
        assert!(!is_running(0));
    }

    #[test]
    #[allow(clippy::disallowed_methods)] // a fixture
    fn a_descriptor_s_own_flock_is_seen_in_its_fdinfo() {
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().expect("tempdir");
        let file = std::fs::File::create(dir.path().join("x.lock")).expect("create");
        let me = std::process::id() as i32;
        let fd = file.as_raw_fd().to_string();
        assert!(!holds_flock_by(me, std::ffi::OsStr::new(&fd)));
        let held = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
            .map_err(|(_, e)| e)
            .expect("lock");
        assert!(holds_flock_by(me, std::ffi::OsStr::new(&fd)));
        drop(held);
    }

    #[test]
    fn a_group_member_is_the_jobs_only_with_its_session_and_job_id() {
        use std::os::unix::process::CommandExt;
        // A session of its own, as the daemon gives every monitor: the test
        // runner's session may lie outside this pid namespace and read as 0.
        let mut command = std::process::Command::new("sleep");
        command.arg("30").env("JOBWARDEN_JOB_ID", "j1");
        // SAFETY: setsid is async-signal-safe and touches no memory of ours.
        unsafe {
            command.pre_exec(|| {
                nix::unistd::setsid()
                    .map(drop)
                    .map_err(std::io::Error::from)
            });
        }
        let mut child = command.spawn().expect("sleep");
        let pid = child.id() as i32;
        wait_for(|| environ_has(pid, b"JOBWARDEN_JOB_ID=j1"));
        let session = stat(pid).expect("child stat").session;
        assert_eq!(session, pid, "the child leads its own session");
        assert_eq!(job_group(pid, session, "j1").ours, vec![pid]);
        assert_eq!(job_group(pid, session, "j2").others, vec![pid]);
        assert_eq!(job_group(pid, session + 1, "j1").others, vec![pid]);
        let _ = child.kill();
        let _ = child.wait();
        assert!(job_group(pid, session, "j1").is_empty());
    }

    /// The environment of a child is its own once it has exec'd.
    fn wait_for(cond: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !cond() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    fn parses_names_with_parentheses() {
        let stat = "42 (a) b (c)) S 1 40 41 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        let s = parse_stat(stat).expect("parses");
        assert_eq!(
            (s.state, s.pgrp, s.session, s.start_time),
            ('S', 40, 41, 987654)
        );
        assert!(!s.is_exiting());
        let dying = "42 (a) R 1 40 41 0 -1 4194564 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert!(parse_stat(dying).expect("parses").is_exiting());
    }
}
