//! The one way to prove that a process is one of a root's own, before
//! anything is decided or signalled because of it, built on what the kernel
//! says (`procfs`): a pid read from a file proves nothing, since a job can
//! write any file under the root and pids are recycled.
//!
//! - a **monitor** is proven by [`prove_monitor`]: alive (not a zombie), the
//!   start time its record names (when it names one), a session leader (the
//!   daemon starts every monitor with `setsid`), running this program (the
//!   same executable file as ours, or the one the monitor recorded when it
//!   started, so an upgraded binary replaced by rename is still known), and
//!   a command line `… --root <root> … monitor <job_id>` (or, for a monitor
//!   started as a spare before its job existed, `… monitor --spare` and the
//!   `flock` on the job's run folder, which a monitor takes first and
//!   holds for life);
//! - a root's **daemon** by [`prove_daemon`] (`proof/daemon.rs`): alive,
//!   running this program and `… daemon`, holding an `flock` through a
//!   descriptor it opened at that root's `daemon.lock`.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use jobwarden_sys::procfs::{
    ExeId, Proc, all_pids, cmdline, exe_id, flock_holders, holds_flock_by, runs_this_program, stat,
};

mod daemon;

pub use daemon::{find_daemon, other_daemon, prove_daemon};

/// What a job's record says about its monitor, and what it must be.
#[derive(Debug, Clone, Copy)]
pub struct MonitorOf<'a> {
    /// The root the monitor was started for (`--root`).
    pub root: &'a Path,
    pub job_id: &'a str,
    /// The start time the record names, if it could be read.
    pub start_time: Option<u64>,
    /// The executable the monitor recorded when it started, if known.
    pub exe: Option<ExeId>,
}

/// Prove that `pid` is the monitor of `of.job_id` under `of.root` (see the
/// module's documentation). The error says which check failed.
pub fn prove_monitor(pid: i32, of: &MonitorOf<'_>) -> Result<Proc, String> {
    let s = stat(pid).ok_or_else(|| format!("no process {pid}"))?;
    if !s.is_live() {
        return Err(format!("process {pid} has exited"));
    }
    if of.start_time.is_some_and(|t| t != s.start_time) {
        return Err(format!("process {pid} is not the one that started then"));
    }
    if s.session != pid {
        return Err(format!("process {pid} does not lead its own session"));
    }
    if !runs_this_program(pid, of.exe) {
        return Err(format!("process {pid} does not run this program"));
    }
    let argv = cmdline(pid).ok_or_else(|| format!("process {pid}'s command line is unreadable"))?;
    let supervises = match monitor_argv(&argv, of.root) {
        Some(Supervises::Job(id)) => id == of.job_id,
        Some(Supervises::Spare) => spare_job(pid, of.root).as_deref() == Some(of.job_id),
        None => false,
    };
    if !supervises {
        return Err(format!(
            "process {pid} is not the monitor of job {}",
            of.job_id
        ));
    }
    Ok(Proc {
        pid,
        start_time: s.start_time,
    })
}

/// A live process that looks like a monitor of some job under a root: its
/// command line says so and it leads its own session. Found by
/// [`monitor_candidates`]; whether it runs this program is in `ours`.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub proc: Proc,
    pub job_id: String,
    /// It runs our executable (or, upgraded by rename, the one at our path).
    pub ours: bool,
    pub exe: Option<ExeId>,
}

/// Every live process whose command line is a monitor's under `root`,
/// leading its own session: one pass over `/proc`, whatever the number of
/// jobs on disk. A candidate not running our executable is proven only by
/// the executable its job's record names ([`Candidate::exe`]).
pub fn monitor_candidates(root: &Path) -> Vec<Candidate> {
    let mut found = Vec::new();
    for pid in all_pids() {
        let Some(argv) = cmdline(pid) else { continue };
        let Some(seen) = monitor_argv(&argv, root) else {
            continue;
        };
        let Some(s) = stat(pid).filter(|s| s.is_live() && s.session == pid) else {
            continue;
        };
        let id = match seen {
            Supervises::Job(id) => id,
            // A spare not yet handed a job supervises nothing.
            Supervises::Spare => match spare_job(pid, root) {
                Some(id) => id,
                None => continue,
            },
        };
        found.push(Candidate {
            proc: Proc {
                pid,
                start_time: s.start_time,
            },
            job_id: id.to_owned(),
            ours: runs_this_program(pid, None),
            exe: exe_id(pid),
        });
    }
    found
}

/// What a monitor's command line says it supervises.
#[derive(Debug, PartialEq, Eq)]
enum Supervises {
    /// `… monitor <job_id>`.
    Job(String),
    /// `… monitor --spare`: the job it was handed, if any, is the one whose
    /// monitor lock it holds ([`spare_job`]).
    Spare,
}

/// Is `argv` a monitor's command line under `root` (`… --root <root> …
/// monitor <job_id>` or `… monitor --spare`), and for which job?
fn monitor_argv(argv: &[Vec<u8>], root: &Path) -> Option<Supervises> {
    let [.., sub, last] = argv else {
        return None;
    };
    if sub.as_slice() != b"monitor" {
        return None;
    }
    let under_root = argv.windows(2).any(|w| {
        w[0].as_slice() == b"--root"
            && same_path(Path::new(std::ffi::OsStr::from_bytes(&w[1])), root)
    });
    if !under_root {
        return None;
    }
    if last.as_slice() == b"--spare" {
        return Some(Supervises::Spare);
    }
    std::str::from_utf8(last)
        .ok()
        .map(|id| Supervises::Job(id.to_owned()))
}

/// Is `argv` the monitor command line of `job_id` under `root`?
#[cfg(test)]
fn is_monitor_argv(argv: &[Vec<u8>], root: &Path, job_id: &str) -> bool {
    monitor_argv(argv, root) == Some(Supervises::Job(job_id.to_owned()))
}

/// The job a spare monitor `pid` was handed: the one whose run folder
/// under `root` it opened and holds the `flock` on (a monitor takes the
/// lock before anything else and keeps it for life). The path is the one
/// the kernel keeps for the descriptor, where the monitor opened it: a job
/// that removes its folder makes it ` (deleted)`, never another job's, so
/// a monitor whose folder was taken away is still known.
fn spare_job(pid: i32, root: &Path) -> Option<String> {
    let layout = jobwarden_model::layout::Layout::new(root.to_path_buf());
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    for fd in fds.flatten() {
        let Ok(target) = std::fs::read_link(fd.path()) else {
            continue;
        };
        let bytes = target.as_os_str().as_bytes();
        let opened_at = Path::new(std::ffi::OsStr::from_bytes(
            bytes.strip_suffix(b" (deleted)").unwrap_or(bytes),
        ));
        let Some(id) = layout.job_of_run_dir(opened_at) else {
            continue;
        };
        if holds_flock_by(pid, &fd.file_name())
            || flock_holders(&layout.monitor_lock(&id)).is_ok_and(|h| h.contains(&pid))
        {
            return Some(id.as_str().to_owned());
        }
    }
    None
}

fn same_path(a: &Path, b: &Path) -> bool {
    a == b
        || matches!(
            (std::fs::canonicalize(a), std::fs::canonicalize(b)),
            (Ok(x), Ok(y)) if x == y
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use jobwarden_sys::procfs::start_time;

    #[test]
    fn a_monitor_command_line_names_its_root_and_job() {
        let argv = |a: &[&str]| a.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
        let root = Path::new("/srv/jw");
        let good = argv(&[
            "jobwarden",
            "--log-format",
            "text",
            "--root",
            "/srv/jw",
            "monitor",
            "j1",
        ]);
        assert!(is_monitor_argv(&good, root, "j1"));
        assert!(!is_monitor_argv(&good, root, "j2"));
        assert!(!is_monitor_argv(&good, Path::new("/srv/other"), "j1"));
        assert!(!is_monitor_argv(
            &argv(&["sleep", "monitor", "j1"]),
            root,
            "j1"
        ));
        assert!(!is_monitor_argv(&argv(&["j1"]), root, "j1"));
        let spare = argv(&["jobwarden", "--root", "/srv/jw", "monitor", "--spare"]);
        assert_eq!(monitor_argv(&spare, root), Some(Supervises::Spare));
        assert_eq!(monitor_argv(&spare, Path::new("/srv/other")), None);
        // A spare holding no job's lock supervises nothing.
        assert_eq!(spare_job(std::process::id() as i32, root), None);
    }

    #[test]
    fn a_plain_process_is_not_a_monitor() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let pid = child.id() as i32;
        let of = MonitorOf {
            root: Path::new("/"),
            job_id: "j1",
            start_time: start_time(pid),
            exe: exe_id(pid),
        };
        assert!(prove_monitor(pid, &of).is_err());
        let me = std::process::id() as i32;
        assert!(prove_monitor(me, &of).is_err());
        let _ = child.kill();
        let _ = child.wait();
    }
}
