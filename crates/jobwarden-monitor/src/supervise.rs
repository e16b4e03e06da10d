//! One command's supervision, the same for every stage: its leader's exit
//! observed (`waitid(WNOWAIT)`, so its pgid cannot be recycled before the
//! group is killed), heartbeats, ABORT and the timeout (SIGTERM, then
//! SIGKILL after `abort_grace`), the group killed and the leader reaped,
//! what else it started killed, its output drained.

use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::Pid;
use serde_json::json;
use tokio::time::{Instant, MissedTickBehavior, sleep_until};

use super::abort_watch::AbortWatch;
use super::output::{self, SharedSink};
use super::stages::StageEnd;
use super::{EarlyEnd, INDEX_AFTER, Monitor, spawn};
use jobwarden_model::abort;
use jobwarden_model::events::Op;
use jobwarden_sys::child::init::InitLink;
use jobwarden_sys::procfs;

/// How long to wait for the output pipes to close once the group is dead.
/// Only a process that left the job's group can hold them longer.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

impl Monitor<'_> {
    /// Run one of the job's commands to its end: its leader's exit
    /// observed, the group killed, the leader reaped, everything else it
    /// started killed, its output drained. The same supervision for every
    /// stage, each with its own `timeout`.
    pub(super) async fn supervise(
        &mut self,
        child: spawn::Started,
        timeout: Duration,
        tail_cap: usize,
        sink: &SharedSink,
        abort_watch: &mut AbortWatch,
    ) -> StageEnd {
        let began = Instant::now();
        let pid = child.pid;
        let mut child = child;
        let init = child.init.take();
        let pumps = output::pump_child(child, sink, tail_cap);
        let (status, early) = self.watch(pid, timeout, sink, abort_watch).await;
        // A sandboxed command's status is the one its init reports; an
        // init that could not say (killed) ended the command with it.
        let status = match init.as_ref().and_then(InitLink::exited) {
            Some(raw) => WaitStatus::from_raw(pid, raw),
            None => status,
        };
        self.under_init = false;
        let cpu_used = match init {
            // The init was the namespace's first process: with it, the
            // kernel killed every process of the namespace. Its reaping
            // counts what it and the command it reaped used.
            Some(_) => procfs::reap_counting_cpu(pid.as_raw()),
            None => {
                // The leader has exited but is not reaped, so its pgid is
                // still ours: kill whatever of the group is left, then
                // reap. Unreaped, it still shows the CPU time it used.
                let _ = killpg(pid, Signal::SIGKILL);
                let cpu = procfs::cpu_time(pid.as_raw());
                let _ = waitpid(pid, None);
                cpu
            }
        };
        let took = began.elapsed();
        self.kill_leftovers().await;
        self.drain(pumps).await;
        self.sync_log_fields(sink);
        StageEnd {
            status,
            early,
            took,
            result_ref: None,
            cpu_used,
            oom_kills: 0,
        }
    }

    /// Heartbeat, honour ABORT and `timeout`, escalate to SIGKILL after
    /// the grace, until the leader exits. Returns its (unreaped) status and
    /// why the job was ended early, if it was.
    pub(super) async fn watch(
        &mut self,
        pid: Pid,
        timeout: Duration,
        sink: &SharedSink,
        abort_watch: &mut AbortWatch,
    ) -> (nix::Result<WaitStatus>, Option<EarlyEnd>) {
        // Nothing is held while the command runs: its lines are seen now
        // (a line that cannot be written is a warning; the end's is synced).
        let _ = self.events.flush();
        let exited = exit_of(pid);
        tokio::pin!(exited);
        let period = self.config.heartbeat_interval;
        let mut heartbeat = tokio::time::interval_at(Instant::now() + period, period);
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let deadline = sleep_until(Instant::now() + timeout);
        tokio::pin!(deadline);
        let mut ending: Option<EarlyEnd> = None;
        let mut kill_at: Option<Instant> = None;
        let index_at = sleep_until(Instant::now() + INDEX_AFTER);
        tokio::pin!(index_at);
        loop {
            tokio::select! {
                status = &mut exited => return (status, ending),
                () = &mut index_at, if self.index_owed => {
                    self.index_owed = false;
                    self.write_owed_view();
                    self.index_running();
                    // The command runs on: the code that started it is
                    // not run again before its end (see `memory`).
                    jobwarden_sys::memory::release_program_pages();
                }
                () = abort_watch.fired(), if ending.is_none() => {
                    let why = self.abort_ending();
                    kill_at = Some(self.end_early(pid, why, &mut ending, sink));
                }
                () = &mut deadline, if ending.is_none() => {
                    let after = humantime::format_duration(timeout).to_string();
                    self.events.append(Op::Timeout, json!({"after": after, "while": self.rec.state}));
                    let why = EarlyEnd::Timeout(timeout);
                    kill_at = Some(self.end_early(pid, why, &mut ending, sink));
                }
                () = sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() => {
                    self.signal_all(pid, Signal::SIGKILL, sink);
                    kill_at = None;
                }
                _ = heartbeat.tick() => {
                    // The fallback for a missed inotify event.
                    if ending.is_none() && abort::requested(&self.layout, &self.rec.job_id) {
                        let why = self.abort_ending();
                        kill_at = Some(self.end_early(pid, why, &mut ending, sink));
                    }
                    self.heartbeat(sink);
                }
            }
        }
    }

    /// Start ending the job early: SIGTERM now; returns when to SIGKILL.
    pub(super) fn end_early(
        &mut self,
        pid: Pid,
        why: EarlyEnd,
        ending: &mut Option<EarlyEnd>,
        sink: &SharedSink,
    ) -> Instant {
        *ending = Some(why);
        self.terminate(pid, sink)
    }

    /// SIGTERM to the job's processes; returns when to escalate to SIGKILL.
    pub(super) fn terminate(&mut self, pid: Pid, sink: &SharedSink) -> Instant {
        self.signal_all(pid, Signal::SIGTERM, sink);
        Instant::now() + self.config.abort_grace
    }

    /// Wait for the pipes to close; give up on output held open by a process
    /// that could not be killed.
    pub(super) async fn drain(&mut self, pumps: [Option<tokio::task::JoinHandle<()>>; 2]) {
        for pump in pumps.into_iter().flatten() {
            let abort = pump.abort_handle();
            if tokio::time::timeout(DRAIN_LIMIT, pump).await.is_err() {
                abort.abort();
                tracing::warn!(job = %self.rec.job_id, "output still held open by a process that survived the kill; stopped reading it");
            }
        }
    }
}

/// Make this process the reaper of its descendants' orphans, so that a
/// grandchild whose parent died is reparented here (and reaped here) rather
/// than lingering as init's zombie. Asked once per process (a monitor
/// serves job after job; nothing takes the attribute away).
pub(super) fn become_subreaper() {
    static ASKED: std::sync::Once = std::sync::Once::new();
    ASKED.call_once(|| {
        // SAFETY: prctl with integer arguments touches no memory.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1) } != 0 {
            tracing::debug!(
                "PR_SET_CHILD_SUBREAPER: {}",
                std::io::Error::last_os_error()
            );
        }
    });
}

/// Reap every child that has already exited (orphaned grandchildren killed
/// with the job's group). Never blocks.
pub(super) fn reap_orphans() {
    while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}

/// Wait until `pid` exits, without reaping it (WNOWAIT): on a pidfd, which
/// becomes readable at the exit, so that no thread waits; where the kernel
/// has no pidfds, on a blocking thread.
pub(super) async fn exit_of(pid: Pid) -> nix::Result<WaitStatus> {
    // SAFETY: the AsyncFd owns the pidfd, which stays open and the same
    // for as long as it is registered.
    let registered = pidfd(pid).map(|fd| unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
    });
    if let Some(Ok(fd)) = registered
        && fd.readable().await.is_ok()
    {
        return wait_exit(pid);
    }
    tokio::task::spawn_blocking(move || wait_exit(pid))
        .await
        .unwrap_or(Err(nix::errno::Errno::ECHILD))
}

/// A pidfd for our child `pid` (Linux 5.3+).
pub(super) fn pidfd(pid: Pid) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes two integers and returns a new descriptor,
    // which we then own alone.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    let fd = i32::try_from(fd).ok().filter(|&fd| fd >= 0)?;
    // SAFETY: `fd` was just opened for us and is owned by nothing else.
    Some(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Block until `pid` exits, without reaping it (WNOWAIT).
pub(super) fn wait_exit(pid: Pid) -> nix::Result<WaitStatus> {
    loop {
        match waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => return other,
        }
    }
}

pub(super) fn exit_fields(status: &nix::Result<WaitStatus>) -> serde_json::Value {
    match status {
        Ok(WaitStatus::Exited(_, code)) => json!({"code": code, "signal": null}),
        Ok(WaitStatus::Signaled(_, sig, _)) => json!({"code": null, "signal": sig.as_str()}),
        other => json!({"code": null, "signal": null, "detail": format!("{other:?}")}),
    }
}
