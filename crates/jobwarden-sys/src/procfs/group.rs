//! What is left of a job's process group once its monitor is gone: the
//! members proven the job's, the ones that cannot be, and the ones dying.

use super::{all_pids, read_small, stat};

/// The live members of a dead monitor's job's process group, as far as
/// they can be proven.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Group {
    /// Members proven to be the job's.
    pub ours: Vec<i32>,
    /// Members that cannot be proven to be the job's.
    pub others: Vec<i32>,
    /// Members that cannot be proven (an exiting process's environment is
    /// gone with its memory) but are dying: inside `exit`, or with a
    /// SIGKILL pending. Never signalled; waited for.
    pub exiting: Vec<i32>,
}

impl Group {
    /// No live member is left.
    pub fn is_empty(&self) -> bool {
        self.ours.is_empty() && self.others.is_empty() && self.exiting.is_empty()
    }
}

/// The live members of process group `pgid`, sorted into the job's own
/// (in the session `session` of its monitor, and started with
/// `JOBWARDEN_JOB_ID=<job_id>`) and the rest. One pass over `/proc`.
pub fn job_group(pgid: i32, session: i32, job_id: &str) -> Group {
    let mut group = Group::default();
    if pgid <= 1 {
        return group;
    }
    let marker = [b"JOBWARDEN_JOB_ID=".as_slice(), job_id.as_bytes()].concat();
    for pid in all_pids() {
        let Some(s) = stat(pid).filter(|s| s.pgrp == pgid && s.is_live()) else {
            continue;
        };
        let proven = s.session == session && session > 1 && environ_has(pid, &marker);
        if proven {
            group.ours.push(pid);
        } else if s.is_exiting() || sigkill_pending(pid) {
            group.exiting.push(pid);
        } else {
            group.others.push(pid);
        }
    }
    group
}

/// Is a SIGKILL pending for `pid` (`/proc/<pid>/status` `SigPnd` or
/// `ShdPnd`): it dies as soon as it next runs.
fn sigkill_pending(pid: i32) -> bool {
    let Some(status) = read_small(&format!("/proc/{pid}/status")) else {
        return false;
    };
    let bit = 1u64 << (libc::SIGKILL - 1);
    status.lines().any(|l| {
        let mask = l
            .strip_prefix("SigPnd:")
            .or_else(|| l.strip_prefix("ShdPnd:"));
        mask.and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .is_some_and(|m| m & bit != 0)
    })
}

/// Was `pid` started with exactly the entry `entry` in its environment?
pub(super) fn environ_has(pid: i32, entry: &[u8]) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|env| env.split(|&b| b == 0).any(|e| e == entry))
}
