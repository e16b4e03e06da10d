//! The one proof that a process is a root's running daemon, for every
//! command that signals it (`reload`) and for the single-instance check
//! of a daemon starting.
//!
//! Nothing a job can write decides it. `daemon.lock` can be replaced by a
//! link to anything another process holds a lock on (another job's run
//! folder, a stranger's file), and `daemon.json` can name any pid.
//! What the kernel says of the process itself cannot be forged by writing
//! files: it is alive (the start time read with its pid identifies it),
//! it runs this program (the same executable file as ours, or a deleted
//! file that was at our path: an upgrade by rename), its command line is
//! `jobwarden … daemon`, and it holds an `flock` through a descriptor it
//! opened at this root's `daemon.lock` (the path the kernel keeps for that
//! descriptor: ` (deleted)` once a job removed the file, never the path of
//! a link made to it later).

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use jobwarden_sys::procfs::{Proc, all_pids, cmdline, holds_flock_by, runs_this_program, stat};

/// Prove that `pid` is the daemon of `root` (see the module's
/// documentation). The error says which check failed.
pub fn prove_daemon(pid: i32, root: &Path) -> Result<Proc, String> {
    // The command line first: the one read that rules out almost every
    // process of a pass over `/proc`.
    let argv = cmdline(pid).ok_or_else(|| format!("no process {pid} runs"))?;
    if subcommand(&argv) != Some(b"daemon".as_slice()) {
        return Err(format!(
            "process {pid} is not a jobwarden daemon (it runs `{}`)",
            shown(&argv)
        ));
    }
    let s = stat(pid).ok_or_else(|| format!("no process {pid} runs"))?;
    if !s.is_live() {
        return Err(format!("process {pid} has exited"));
    }
    if !runs_this_program(pid, None) {
        return Err(format!("process {pid} does not run this program"));
    }
    if !holds_root_lock(pid, root) {
        return Err(format!(
            "process {pid} is a jobwarden daemon, but holds no lock it took on {}",
            lock_path(root).display()
        ));
    }
    let proc = Proc {
        pid,
        start_time: s.start_time,
    };
    // Read again: the pid is the same process as when it was proven.
    if !proc.is_alive() {
        return Err(format!("process {pid} has exited"));
    }
    Ok(proc)
}

/// The daemon of `root`: the first of `named` (pids that files name, such
/// as the holder of `daemon.lock` and `daemon.json`'s) proven to be it,
/// else any process proven so in one pass over `/proc` (its lock file may
/// have been removed or replaced). `Err`: why each named pid is not it.
pub fn find_daemon(root: &Path, named: &[i32]) -> Result<Proc, Vec<String>> {
    let mut refused = Vec::new();
    for &pid in named {
        match prove_daemon(pid, root) {
            Ok(proc) => return Ok(proc),
            Err(why) => refused.push(why),
        }
    }
    let me = std::process::id() as i32;
    all_pids()
        .into_iter()
        .filter(|&pid| pid != me && !named.contains(&pid))
        .find_map(|pid| prove_daemon(pid, root).ok())
        .ok_or(refused)
}

/// Another process than this one proven to be `root`'s daemon, found in
/// one pass over `/proc`: what a daemon starting checks after it took its
/// lock, so that a lock file removed and made again under a running
/// daemon does not let a second one start beside it.
pub fn other_daemon(root: &Path) -> Option<Proc> {
    let me = std::process::id() as i32;
    all_pids()
        .into_iter()
        .filter(|&pid| pid != me)
        .find_map(|pid| prove_daemon(pid, root).ok())
}

/// The subcommand of a `jobwarden` command line: its first argument that
/// is neither an option nor the value of a global option taking one.
fn subcommand(argv: &[Vec<u8>]) -> Option<&[u8]> {
    let mut args = argv.iter().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_slice() {
            b"--root" | b"--config" | b"--log-format" => {
                args.next();
            }
            a if a.starts_with(b"-") => {}
            a => return Some(a),
        }
    }
    None
}

fn shown(argv: &[Vec<u8>]) -> String {
    let words: Vec<String> = argv
        .iter()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    words.join(" ")
}

/// Where `root`'s daemon lock is, as the kernel names a descriptor open
/// on it (the root's real path).
fn lock_path(root: &Path) -> PathBuf {
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    jobwarden_model::layout::Layout::new(root).daemon_lock()
}

/// Does `pid` hold an `flock` through a descriptor it opened at `root`'s
/// `daemon.lock` (removed since, or not)?
fn holds_root_lock(pid: i32, root: &Path) -> bool {
    let lock = lock_path(root);
    let lock = lock.as_os_str().as_bytes();
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        let Ok(target) = std::fs::read_link(fd.path()) else {
            return false;
        };
        let target = target.as_os_str().as_bytes();
        let at_lock = target == lock || target.strip_suffix(b" (deleted)") == Some(lock);
        at_lock && holds_flock_by(pid, &fd.file_name())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(a: &[&str]) -> Vec<Vec<u8>> {
        a.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    #[test]
    fn the_subcommand_is_the_first_word_that_is_no_option_value() {
        let daemon = argv(&["jobwarden", "--root", "/srv/jw", "daemon"]);
        assert_eq!(subcommand(&daemon), Some(b"daemon".as_slice()));
        let monitor = argv(&["jobwarden", "--root", "daemon", "monitor", "j1"]);
        assert_eq!(subcommand(&monitor), Some(b"monitor".as_slice()));
        let flags = argv(&["jobwarden", "--log-format", "json", "-v", "daemon"]);
        assert_eq!(subcommand(&flags), Some(b"daemon".as_slice()));
        assert_eq!(subcommand(&argv(&["jobwarden"])), None);
    }

    #[test]
    fn this_test_process_is_no_daemon() {
        let me = std::process::id() as i32;
        assert!(prove_daemon(me, Path::new("/")).is_err());
        assert!(prove_daemon(0, Path::new("/")).is_err());
    }
}
