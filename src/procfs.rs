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
}
