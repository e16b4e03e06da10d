//! Facts about processes read from `/proc`: a process's start time, which
//! with its pid identifies it for good (a recycled pid has another start).

/// Start time of `pid` in clock ticks since boot (`/proc/<pid>/stat` field
/// 22), or `None` if there is no such process.
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_start_time(&stat)
}

/// Is the process `pid` alive and the same one that started at `start`?
pub fn is_same_process(pid: i32, start: u64) -> bool {
    start_time(pid) == Some(start)
}

/// Is `pid` a live (not zombie) process?
pub fn is_running(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // Field 3, the state, follows the command name's closing parenthesis.
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next());
    !matches!(state, Some("Z" | "X") | None)
}

/// The pid holding an `flock` on `path`, read from `/proc/locks` without
/// touching the lock (taking it to test it, even for an instant, could make
/// its owner's own attempt fail). `Ok(None)`: nobody holds it.
///
/// `/proc/locks` names files by device and inode only: a lock still held on
/// a deleted file whose inode number was reused would be reported too, so
/// this is for files that are never deleted while locked (`daemon.lock`).
/// Of several entries, a live process holding it is preferred.
pub fn flock_holder(path: &std::path::Path) -> std::io::Result<Option<i32>> {
    let holders = flock_holders(path)?;
    Ok(holders
        .iter()
        .copied()
        .find(|&p| is_running(p))
        .or(holders.first().copied()))
}

/// Every pid `/proc/locks` lists as holding an `flock` on `path`'s device
/// and inode.
pub fn flock_holders(path: &std::path::Path) -> std::io::Result<Vec<i32>> {
    use std::os::unix::fs::MetadataExt;
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let locks = std::fs::read_to_string("/proc/locks")?;
    let dev = meta.dev();
    let id = format!(
        "{:02x}:{:02x}:{}",
        nix::sys::stat::major(dev),
        nix::sys::stat::minor(dev),
        meta.ino()
    );
    Ok(parse_flock_holders(&locks, &id))
}

/// In `/proc/locks` text, the pids of the granted FLOCKs on `dev_ino`
/// (`MAJ:MIN:INODE`, device numbers in hex). Waiters (`->`) do not count.
fn parse_flock_holders(locks: &str, dev_ino: &str) -> Vec<i32> {
    locks
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // `1: FLOCK ADVISORY WRITE 1234 00:2c:56789 0 EOF`
            match f.as_slice() {
                [_, "FLOCK", _, _, pid, id, ..] if *id == dev_ino => pid.parse().ok(),
                _ => None,
            }
        })
        .collect()
}

fn parse_start_time(stat: &str) -> Option<u64> {
    // The command name (field 2) is in parentheses and may hold spaces or
    // parentheses itself; fields after the last ')' are plain.
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` starts at field 3 (state); field 22 is the 20th from there.
    rest.split_whitespace().nth(19)?.parse().ok()
}

// ---------------------------------------------------------------------------
// Process trees: every process a job started, wherever it went.

/// Every live (not zombie) descendant of `pid`, found by following the
/// parent links of `/proc/*/stat`, children before grandchildren. A process
/// that left its parent's process group or session (`setsid`, `setpgid`) is
/// still found; one whose parent died is found too when `pid` is its
/// subreaper (it was reparented to `pid`). Zombies are passed through, so
/// nothing is lost while they wait to be reaped. A snapshot: processes can
/// fork and exit while it is read, so a caller that must leave none
/// repeats it until it comes back empty.
pub fn descendants(pid: i32) -> Vec<i32> {
    let table = process_table();
    let mut found = Vec::new();
    let mut frontier = vec![pid];
    while let Some(parent) = frontier.pop() {
        for &(child, _, live) in table.iter().filter(|(_, pp, _)| *pp == parent) {
            if child == pid || found.contains(&child) {
                continue;
            }
            if live {
                found.push(child);
            }
            frontier.push(child);
        }
    }
    found
}

/// `(pid, ppid, live)` of every process in `/proc`; unreadable entries
/// (gone while listed) are skipped.
fn process_table() -> Vec<(i32, i32, bool)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let (state, ppid) = parse_state_ppid(&stat)?;
            Some((pid, ppid, !matches!(state, "Z" | "X")))
        })
        .collect()
}

/// Fields 3 (state) and 4 (ppid) of a `/proc/<pid>/stat` line.
fn parse_state_ppid(stat: &str) -> Option<(&str, i32)> {
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = rest.next()?;
    Some((state, rest.next()?.parse().ok()?))
}

/// CPU time (user + system) `pid` has used, from `/proc/<pid>/stat`
/// (fields 14 and 15), readable until the process is reaped: a zombie
/// keeps its counts.
pub fn cpu_time(pid: i32) -> Option<std::time::Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace().skip(11);
    let utime: u64 = rest.next()?.parse().ok()?;
    let stime: u64 = rest.next()?.parse().ok()?;
    // SAFETY: sysconf only reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = u64::try_from(hz).ok().filter(|&h| h > 0)?;
    Some(std::time::Duration::from_millis(
        (utime + stime) * 1000 / hz,
    ))
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
    fn finds_the_holder_of_a_flock_and_not_its_waiters() {
        let locks = "1: POSIX  ADVISORY  WRITE 10 00:2c:99 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 4321 00:2c:99 0 EOF\n\
                     2: -> FLOCK  ADVISORY  WRITE 77 00:2c:99 0 EOF\n";
        assert_eq!(parse_flock_holders(locks, "00:2c:99"), vec![4321]);
        assert!(parse_flock_holders(locks, "00:2c:98").is_empty());
    }

    #[test]
    fn sees_a_lock_held_in_this_process() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x.lock");
        assert_eq!(flock_holder(&path).expect("no file"), None);
        let held = crate::fsio::try_lock(&path).expect("lock").expect("free");
        let me = std::process::id() as i32;
        // Other processes' locks on deleted files may share the inode
        // number: only our own entry is certain.
        assert!(flock_holders(&path).expect("read").contains(&me));
        drop(held);
        assert!(!flock_holders(&path).expect("read").contains(&me));
    }

    #[test]
    fn parses_names_with_parentheses() {
        let stat = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_start_time(stat), Some(987654));
    }

    #[test]
    fn descendants_include_a_child_that_left_our_process_group() {
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .expect("spawn sleep");
        let me = std::process::id() as i32;
        let pid = child.id() as i32;
        assert!(descendants(me).contains(&pid));
        assert!(!descendants(me).contains(&me));
        child.kill().expect("kill");
        child.wait().expect("reap");
        assert!(!descendants(me).contains(&pid));
    }

    #[test]
    fn reads_state_ppid_and_cpu_time() {
        let stat = "42 (a b) S 7 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20";
        assert_eq!(parse_state_ppid(stat), Some(("S", 7)));
        assert!(cpu_time(std::process::id() as i32).is_some());
    }
}
