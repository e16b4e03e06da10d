//! Process trees: every process a job started, wherever it went, found
//! through `/proc`'s parent links.

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
            let stat = super::read_small(&format!("/proc/{pid}/stat"))?;
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
    cpu_ticks(pid)
}

/// Reap our exited child `pid` (waiting for it if it has not exited),
/// and say the CPU time it and the children it reaped used, as the kernel
/// counts them for the reaping (`wait4`'s usage): a sandboxed job's,
/// counted by its init. `None` when `pid` is no child of ours.
pub fn reap_counting_cpu(pid: i32) -> Option<std::time::Duration> {
    let mut status = 0;
    // SAFETY: an all-zero `rusage` is a valid value of the plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let reaped = loop {
        // SAFETY: wait4 writes only through the two pointers, to locals
        // that outlive the call.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if r != -1 || nix::errno::Errno::last() != nix::errno::Errno::EINTR {
            break r;
        }
    };
    (reaped == pid).then(|| duration_of(usage.ru_utime) + duration_of(usage.ru_stime))
}

fn duration_of(t: libc::timeval) -> std::time::Duration {
    let secs = u64::try_from(t.tv_sec).unwrap_or(0);
    let micros = u32::try_from(t.tv_usec).unwrap_or(0);
    std::time::Duration::from_secs(secs) + std::time::Duration::from_micros(micros.into())
}

fn cpu_ticks(pid: i32) -> Option<std::time::Duration> {
    let stat = super::read_small(&format!("/proc/{pid}/stat"))?;
    let mut rest = stat[stat.rfind(')')? + 1..].split_whitespace().skip(11);
    let mut ticks: u64 = 0;
    for _ in 0..2 {
        ticks += rest.next()?.parse::<u64>().ok()?;
    }
    // SAFETY: sysconf only reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = u64::try_from(hz).ok().filter(|&h| h > 0)?;
    Some(std::time::Duration::from_millis(ticks * 1000 / hz))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_reaped_child_counts_the_cpu_it_and_its_reaped_children_used() {
        // The shell spends its time in a child it waits for.
        let child = std::process::Command::new("sh")
            .args([
                "-c",
                "sh -c 'i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done'",
            ])
            .spawn()
            .expect("spawn sh");
        let pid = child.id() as i32;
        // Reaped here, not by `Child::wait`.
        std::mem::forget(child);
        let used = reap_counting_cpu(pid).expect("our child, reaped");
        assert!(used >= std::time::Duration::from_millis(10), "{used:?}");
        // Not a child of ours at all.
        assert_eq!(reap_counting_cpu(1), None);
    }

    #[test]
    fn reads_state_ppid_and_cpu_time() {
        let stat = "42 (a b) S 7 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20";
        assert_eq!(parse_state_ppid(stat), Some(("S", 7)));
        assert!(cpu_time(std::process::id() as i32).is_some());
    }
}
