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
pub fn flock_holder(path: &std::path::Path) -> std::io::Result<Option<i32>> {
    use std::os::unix::fs::MetadataExt;
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
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
    Ok(parse_flock_holder(&locks, &id))
}

/// In `/proc/locks` text, the pid of the granted FLOCK on `dev_ino`
/// (`MAJ:MIN:INODE`, device numbers in hex). Waiters (`->`) do not count.
fn parse_flock_holder(locks: &str, dev_ino: &str) -> Option<i32> {
    locks.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // `1: FLOCK ADVISORY WRITE 1234 00:2c:56789 0 EOF`
        match f.as_slice() {
            [_, "FLOCK", _, _, pid, id, ..] if *id == dev_ino => pid.parse().ok(),
            _ => None,
        }
    })
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
        assert_eq!(parse_flock_holder(locks, "00:2c:99"), Some(4321));
        assert_eq!(parse_flock_holder(locks, "00:2c:98"), None);
    }

    #[test]
    fn sees_a_lock_held_in_this_process() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x.lock");
        assert_eq!(flock_holder(&path).expect("no file"), None);
        let held = crate::fsio::try_lock(&path).expect("lock").expect("free");
        let me = std::process::id() as i32;
        assert_eq!(flock_holder(&path).expect("read"), Some(me));
        drop(held);
        assert_eq!(flock_holder(&path).expect("read"), None);
    }

    #[test]
    fn parses_names_with_parentheses() {
        let stat = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_start_time(stat), Some(987654));
    }
}
