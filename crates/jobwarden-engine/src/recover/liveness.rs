//! Is a job's monitor alive, and what is left of a dead monitor's job:
//! decided by processes proven to be ours ([`jobwarden_sys::procfs`]), never by a
//! pid or a lock file alone. Anything under a run folder may have been
//! written, removed or replaced by the job itself.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::proof::{self, MonitorOf};
use jobwarden_model::job::{JobId, JobRecord};
use jobwarden_model::layout::Layout;
use jobwarden_sys::procfs::{self, Proc};

/// How long a killed orphaned process group may take to exit (freeing a
/// lot of memory takes a while) before its attempt is given up on.
pub const ORPHAN_EXIT_LIMIT: Duration = Duration::from_secs(60);

/// How often a dying group is looked at again.
const ORPHAN_POLL: Duration = Duration::from_millis(50);

/// What became of a job's monitor.
#[derive(Debug, PartialEq, Eq)]
pub enum Monitor {
    /// No monitor ever took the job ([`JobRecord::monitor_took`]).
    NeverStarted,
    /// This proven process is the job's monitor.
    Alive(Proc),
    /// A monitor took the job and is gone.
    Gone,
}

/// The state of job `id`'s monitor, judging by its record if it can be read.
pub fn monitor_state(layout: &Layout, id: &JobId) -> Monitor {
    let rec = JobRecord::load_job(layout, id).ok();
    monitor_state_of(layout, id, rec.as_ref())
}

/// [`monitor_state`] with the record already read (`None`: unusable).
pub fn monitor_state_of(layout: &Layout, id: &JobId, rec: Option<&JobRecord>) -> Monitor {
    if let Some(p) = live_monitor(layout, id, rec) {
        return Monitor::Alive(p);
    }
    match rec {
        Some(rec) if !rec.monitor_took() => Monitor::NeverStarted,
        _ => Monitor::Gone,
    }
}

/// The live monitor of job `id`, proven: the one its record names, else a
/// holder of the lock on its run folder (which the monitor holds by descriptor for
/// its whole life; the record may be garbage, the file replaced).
pub fn live_monitor(layout: &Layout, id: &JobId, rec: Option<&JobRecord>) -> Option<Proc> {
    let of = MonitorOf {
        root: layout.root(),
        job_id: id.as_str(),
        start_time: rec.and_then(|r| r.monitor_start_time),
        exe: rec.and_then(|r| r.monitor_exe),
    };
    let named = rec.and_then(|r| r.monitor_pid).filter(|&p| p > 1);
    if let Some(p) = named.and_then(|pid| prove(pid, &of)) {
        return Some(p);
    }
    let holders = procfs::flock_holders(&layout.monitor_lock(id)).unwrap_or_default();
    let unnamed = MonitorOf {
        start_time: None,
        ..of
    };
    holders
        .into_iter()
        .filter(|&pid| Some(pid) != named)
        .find_map(|pid| prove(pid, &unnamed))
}

/// [`live_monitor`], and if that finds none, the processes themselves
/// asked (one pass over `/proc`): the record's pid and start time and the
/// lock file are the job's to write, so before a job is ended or its group
/// killed because its monitor looks gone, this is what decides. For the
/// few jobs judged so, not for every ended one.
fn live_monitor_anywhere(layout: &Layout, id: &JobId, rec: Option<&JobRecord>) -> Option<Proc> {
    if let Some(p) = live_monitor(layout, id, rec) {
        return Some(p);
    }
    let found = LiveMonitors::scan(layout).of(id, rec);
    if let Some(p) = found {
        tracing::warn!(job = %id, pid = p.pid, "its monitor runs, though its record or the lock on its run folder says otherwise (written by the job?): it is alive");
    }
    found
}

/// The live monitors of a root, found in one pass over `/proc` (see
/// [`proof::monitor_candidates`]): what startup recovery judges every job
/// by, at a cost that does not grow with the jobs on disk.
#[derive(Debug, Default)]
pub struct LiveMonitors(HashMap<String, proof::Candidate>);

impl LiveMonitors {
    pub fn scan(layout: &Layout) -> Self {
        let found = proof::monitor_candidates(layout.root());
        LiveMonitors(found.into_iter().map(|c| (c.job_id.clone(), c)).collect())
    }

    /// The proven monitor of job `id`: running our executable, or the one
    /// its record (`rec`, if usable) says its monitor started from.
    pub fn of(&self, id: &JobId, rec: Option<&JobRecord>) -> Option<Proc> {
        let c = self.0.get(id.as_str())?;
        let recorded = rec.and_then(|r| r.monitor_exe);
        (c.ours || (recorded.is_some() && c.exe == recorded)).then_some(c.proc)
    }

    /// Ids of live monitors' jobs.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }
}

fn prove(pid: i32, of: &MonitorOf<'_>) -> Option<Proc> {
    proof::prove_monitor(pid, of)
        .map_err(|why| tracing::debug!(job = of.job_id, "{why}"))
        .ok()
}

/// What is left of a dead monitor's job.
#[derive(Debug)]
pub enum Orphans {
    /// Nothing of the job runs.
    Gone,
    /// Its process group was proven the job's and sent SIGKILL; it may
    /// still be exiting.
    Killed(Clearing),
    /// Processes run in the group its record names that cannot be proven
    /// the job's: nothing was signalled, and no other attempt may start.
    Unproven,
    /// What is left of the group is exiting (a big process freeing its
    /// memory after the parent-death signal): nothing was signalled; it is
    /// waited for, then judged again.
    Exiting(Clearing),
    /// A live monitor of the job was found, whatever its record says: the
    /// job is its monitor's, nothing was signalled and nothing is ended.
    MonitorAlive(Proc),
}

/// A killed orphaned process group of a job, exiting.
#[derive(Debug, Clone)]
pub struct Clearing {
    pub id: JobId,
    pgid: i32,
    session: i32,
}

impl Clearing {
    /// Wait (blocking, at most `limit`) for the group to be gone, killing
    /// any member of it again; true if it is gone.
    pub fn wait_gone(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            let group = procfs::job_group(self.pgid, self.session, self.id.as_str());
            if group.is_empty() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            if !group.ours.is_empty() {
                let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGKILL);
            }
            std::thread::sleep(ORPHAN_POLL);
        }
    }
}

/// Kill what is left of a dead monitor's job. Its leader got SIGKILL with
/// its monitor (parent-death signal), but a big process takes a while to
/// exit, and other members of its group live on. The group is signalled
/// only if one of its live members is proven the job's (in the monitor's
/// session, started with the job's id in its environment): the kernel
/// hands the group's id to no one else while a member lives; and only if
/// no live monitor of the job is found, whatever its record says.
pub fn clear_orphaned_group(layout: &Layout, rec: &JobRecord) -> Orphans {
    let pgid = rec.pgid.filter(|&p| p > 1);
    let session = rec.monitor_pid.filter(|&p| p > 1);
    let (Some(pgid), Some(session)) = (pgid, session) else {
        return Orphans::Gone;
    };
    let group = procfs::job_group(pgid, session, rec.job_id.as_str());
    let clearing = Clearing {
        id: rec.job_id.clone(),
        pgid,
        session,
    };
    if group.ours.is_empty() {
        if group.others.is_empty() {
            if group.exiting.is_empty() {
                return Orphans::Gone;
            }
            tracing::info!(job = %rec.job_id, pgid, members = ?group.exiting, "what is left of its process group is exiting: waiting for it");
            return Orphans::Exiting(clearing);
        }
        tracing::warn!(job = %rec.job_id, pgid, members = ?group.others, "the process group its record names runs processes that cannot be proven the job's: not signalled, and no other attempt starts");
        return Orphans::Unproven;
    }
    if let Some(monitor) = live_monitor_anywhere(layout, &rec.job_id, Some(rec)) {
        // Never kill a group whose monitor is not proven gone.
        tracing::error!(job = %rec.job_id, pid = monitor.pid, "its monitor runs: its process group is not signalled, and the job is left to its monitor");
        return Orphans::MonitorAlive(monitor);
    }
    tracing::warn!(job = %rec.job_id, pgid, members = ?group.ours, "killing what is left of its process group");
    let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    Orphans::Killed(clearing)
}
