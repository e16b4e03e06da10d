//! What holds a job's processes, and ending every one of them.
//!
//! - **cgroup**: where a cgroup v2 subtree is delegated (see [`jobwarden_sys::cgroup`]),
//!   the job runs in its own cgroup: `memory.max` and `pids.max` apply to
//!   it as a whole, the OOM killer's kills are counted, and `cgroup.kill`
//!   ends everything in it at once, however it forked or regrouped.
//! - **process-tree**: elsewhere, the monitor (a child subreaper) finds the
//!   job's processes as its own descendants by their parent links in
//!   `/proc`, which leaving the process group or session does not change.
//!
//! In both, the profile's rlimits are set on the job's processes, and at
//! the end of every command (normal exit, abort, timeout) nothing it
//! started is left running. The choice is said in the `limits` event and
//! the record's `containment`.

use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::{Pid, getpgid};
use serde_json::json;
use tokio::time::Instant;

use super::Monitor;
use super::output::{self, SharedSink};
use super::sandbox;
use super::spawn::{Confinement, Stage};
use super::stages::StageEnd;
use super::supervise::reap_orphans;
use jobwarden_model::config::format_size;
use jobwarden_model::events::Op;
use jobwarden_sys::cgroup::{CgroupLimits, JobCgroup};
use jobwarden_sys::procfs;

/// How long to keep killing what is left of a job (processes forking as
/// they are killed, or stuck in uninterruptible sleep) before giving up.
const KILL_LIMIT: Duration = Duration::from_secs(5);
/// Pause between two rounds of killing: time for SIGKILL to land.
const KILL_ROUND: Duration = Duration::from_millis(10);

/// What the job's processes are held in.
#[derive(Debug)]
pub(super) enum Containment {
    Cgroup(JobCgroup),
    ProcessTree,
}

impl Containment {
    fn name(&self) -> &'static str {
        match self {
            Containment::Cgroup(_) => "cgroup",
            Containment::ProcessTree => "process-tree",
        }
    }

    fn cgroup(&self) -> Option<&JobCgroup> {
        match self {
            Containment::Cgroup(cg) => Some(cg),
            Containment::ProcessTree => None,
        }
    }
}

impl Monitor<'_> {
    /// Choose the job's containment (its own cgroup where one can be had),
    /// record it in `job.json` and say so in the `limits` event.
    pub(super) fn contain(&mut self) {
        let limits = self.profile.limits;
        let wanted = CgroupLimits {
            memory_max: limits.memory,
            pids_max: limits.processes,
        };
        let (containment, why_not) = match JobCgroup::create(self.rec.job_id.as_str(), wanted) {
            Ok(cg) => (Containment::Cgroup(cg), None),
            Err(why) => (Containment::ProcessTree, Some(why)),
        };
        let mut fields = json!({
            "containment": containment.name(),
            "limits": limits.shown(),
        });
        if let Some(cg) = containment.cgroup() {
            fields["cgroup"] = json!(cg.dir().display().to_string());
            fields["cgroup_applied"] = json!(cg.applied);
            fields["cgroup_not_applied"] = json!(cg.not_applied);
        }
        if let Some(why) = why_not {
            tracing::debug!(job = %self.rec.job_id, "no cgroup for the job: {why}");
            fields["no_cgroup"] = json!(why);
        }
        self.sandbox = sandbox::state(self.layout.root(), self.profile.sandbox);
        fields["sandbox"] = json!(self.sandbox.name());
        if let Some(why) = self.sandbox.why_not() {
            tracing::warn!(job = %self.rec.job_id, "the job runs without a sandbox: {why}");
            fields["no_sandbox"] = json!(why);
        }
        self.events.append(Op::Limits, fields);
        self.rec.containment = Some(containment.name().to_owned());
        self.containment = containment;
    }

    /// What the job's next command applies to itself before it runs.
    pub(super) fn confinement(&self) -> Confinement {
        let limits = &self.profile.limits;
        Confinement {
            data: limits.memory,
            cpu_secs: limits.cpu_time.map(|d| d.as_secs()),
            nofile: limits.open_files,
            nproc: limits.processes,
            cgroup_procs: self.containment.cgroup().map(JobCgroup::procs_fd),
        }
    }

    /// OOM kills in the job's cgroup so far (0 without one).
    pub(super) fn oom_kills(&self) -> u64 {
        self.containment
            .cgroup()
            .and_then(JobCgroup::oom_kills)
            .unwrap_or(0)
    }

    /// Send `sig` to the job's group and to every other process it started
    /// (those that left the group), and say so in its log and events.
    pub(super) fn signal_all(&mut self, pgid: Pid, sig: Signal, sink: &SharedSink) {
        if self.under_init {
            return self.signal_init(pgid, sig, sink);
        }
        let result = killpg(pgid, sig);
        let others: Vec<i32> = self
            .job_processes()
            .into_iter()
            .filter(|&p| getpgid(Some(Pid::from_raw(p))).is_ok_and(|g| g != pgid))
            .collect();
        for &p in &others {
            let _ = kill(Pid::from_raw(p), sig);
        }
        let note = match others.len() {
            0 => format!("sent {} to the job's process group", sig.as_str()),
            n => format!(
                "sent {} to the job's process group and {n} other process(es) it started",
                sig.as_str()
            ),
        };
        output::lock(sink).note(&note);
        self.events.append(
            Op::Signal,
            json!({"name": sig.as_str(), "pgid": pgid.as_raw(), "ok": result.is_ok(), "others": others.len()}),
        );
        tracing::info!(job = %self.rec.job_id, signal = sig.as_str(), others = others.len(), "signalled the job's processes");
    }

    /// Send `sig` to the sandbox's init (`pid`), which passes it on to
    /// every process of the job (SIGKILL kills the init, and with it the
    /// whole pid namespace).
    fn signal_init(&mut self, pid: Pid, sig: Signal, sink: &SharedSink) {
        let result = kill(pid, sig);
        output::lock(sink).note(&format!(
            "sent {} to every process of the job (through its sandbox's init)",
            sig.as_str()
        ));
        self.events.append(
            Op::Signal,
            json!({"name": sig.as_str(), "pgid": pid.as_raw(), "ok": result.is_ok(), "others": 0, "via": "init"}),
        );
        tracing::info!(job = %self.rec.job_id, signal = sig.as_str(), "signalled the job's processes through its init");
    }

    /// Every live process of the job: its cgroup's members and the
    /// monitor's descendants.
    fn job_processes(&self) -> Vec<i32> {
        let mut pids = procfs::descendants(std::process::id() as i32);
        if let Some(cg) = self.containment.cgroup() {
            for p in cg.members() {
                if !pids.contains(&p) {
                    pids.push(p);
                }
            }
        }
        pids
    }

    /// After a command's leader exited and was reaped: SIGKILL whatever it
    /// left (the cgroup at once, then each descendant, again until none is
    /// left or [`KILL_LIMIT`]), reaping as they die.
    pub(super) async fn kill_leftovers(&mut self) {
        let in_cgroup = self.containment.cgroup().is_some();
        let Some(mut left) = leftovers().or_else(|| in_cgroup.then(Vec::new)) else {
            // No child at all, nor a cgroup: nothing to kill or reap.
            return;
        };
        let found = left.len();
        let cgroup_kill = self.containment.cgroup().map(JobCgroup::kill);
        let until = Instant::now() + KILL_LIMIT;
        let mut killed = 0;
        loop {
            let populated = self
                .containment
                .cgroup()
                .is_some_and(JobCgroup::is_populated);
            if left.is_empty() && !populated {
                break;
            }
            if Instant::now() >= until {
                tracing::warn!(job = %self.rec.job_id, left = ?left, "processes of the job survive SIGKILL (uninterruptible?); giving up on them");
                break;
            }
            for &p in &left {
                if kill(Pid::from_raw(p), Signal::SIGKILL).is_ok() {
                    killed += 1;
                }
            }
            if populated {
                self.containment.cgroup().map(JobCgroup::kill);
            }
            tokio::time::sleep(KILL_ROUND).await;
            reap_orphans();
            left = leftovers().unwrap_or_default();
        }
        reap_orphans();
        if found > 0 || killed > 0 {
            self.events.append(
                Op::LeftoversKilled,
                json!({"while": self.rec.state, "processes": found.max(killed), "cgroup_kill": cgroup_kill}),
            );
        }
    }

    /// Remove the job's cgroup once the job's last command is over.
    pub(super) fn release_containment(&mut self) {
        let Some(cg) = self.containment.cgroup() else {
            return;
        };
        if let Err(e) = cg.remove() {
            tracing::warn!(job = %self.rec.job_id, "removing its cgroup {}: {e}", cg.dir().display());
        }
        self.containment = Containment::ProcessTree;
    }
}

/// Words in a failing command's stderr that say it ran out of memory.
const OUT_OF_MEMORY: [&str; 6] = [
    "cannot allocate memory",
    "out of memory",
    "memoryerror",
    "bad_alloc",
    "memory allocation of",
    "enomem",
];

impl Monitor<'_> {
    /// If one of the profile's limits ended `stage`'s command, why, said
    /// plainly; `stderr` is its stderr's tail.
    pub(super) fn limit_reason(
        &self,
        stage: Stage,
        end: &StageEnd,
        stderr: &str,
    ) -> Option<String> {
        let limits = self.profile.limits;
        let who = match stage {
            Stage::Run => String::new(),
            Stage::Prepare | Stage::Publish => format!("{} ", stage.as_str()),
        };
        let memory = limits.memory.map_or(String::new(), |m| {
            format!(" (memory limit {})", format_size(m))
        });
        let signal = match &end.status {
            Ok(WaitStatus::Signaled(_, sig, _)) => Some(*sig),
            _ => None,
        };
        let code = match &end.status {
            Ok(WaitStatus::Exited(_, code)) => Some(*code),
            _ => None,
        };
        if end.oom_kills > 0 {
            return Some(match (signal, code) {
                (Some(Signal::SIGKILL), _) => format!("{who}killed by the OOM killer{memory}"),
                (_, Some(code)) => format!(
                    "{who}exited with code {code} after the OOM killer killed {} of its processes{memory}",
                    end.oom_kills
                ),
                _ => format!(
                    "{who}ended after the OOM killer killed {} of its processes{memory}",
                    end.oom_kills
                ),
            });
        }
        if let Some(cpu) = limits.cpu_time {
            let shown = humantime::format_duration(cpu);
            match signal {
                Some(Signal::SIGXCPU) => {
                    return Some(format!("{who}CPU time limit {shown} exceeded (SIGXCPU)"));
                }
                Some(Signal::SIGKILL) if end.cpu_used.is_some_and(|u| u >= cpu) => {
                    return Some(format!(
                        "{who}CPU time limit {shown} exceeded (SIGKILL at the hard limit)"
                    ));
                }
                _ => {}
            }
        }
        let lower = stderr.to_lowercase();
        if limits.memory.is_some()
            && code.is_some_and(|c| c != 0)
            && OUT_OF_MEMORY.iter().any(|w| lower.contains(w))
        {
            return Some(format!(
                "{who}exited with code {} out of memory{memory}: an allocation beyond the limit fails (RLIMIT_DATA)",
                code.unwrap_or_default()
            ));
        }
        None
    }
}

/// The monitor's live descendants; `None` when it has no child at all
/// (not even one to reap). A subreaper with no children has no
/// descendants (every orphan of the job is reparented to it), which one
/// `waitid` tells without reading every process in `/proc`.
fn leftovers() -> Option<Vec<i32>> {
    let none = matches!(
        waitid(
            Id::All,
            WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT
        ),
        Err(nix::errno::Errno::ECHILD)
    );
    (!none).then(|| procfs::descendants(procfs::own_pid()))
}
