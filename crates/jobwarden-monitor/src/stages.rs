//! The order of a job's commands and what each one's end means: the
//! profile's `prepare` (state `preparing`), the main command (`running`),
//! then the profile's `publish` (`publishing`), which runs only after the
//! main command exited 0. Every stage runs under the same supervision
//! ([`Monitor::supervise`]: heartbeats, ABORT, its own timeout, the group
//! killed before the leader is reaped); this module only decides what comes
//! next.
//!
//! - A phase that exits non-zero, is killed, cannot start or times out ends
//!   the job (`failed` or `timed_out`) with `failure_stage` naming it;
//!   nothing after it runs. ABORT ends the job `aborted` in any stage.
//! - A command that cannot start because of the setup (program not found
//!   or not executable, workdir missing: [`NotStarted::Setup`]) ends the
//!   job `setup_failed` instead, in any stage: no cooldown, no automatic
//!   retry, and the reason says what to fix.
//! - `exit_code` and `signal` in the record are the main command's only; a
//!   phase's exit is the `phase_exited` event.
//! - Publish's last non-empty stdout line becomes the job's `result_ref`.
//! - With phases, `job.log` marks where each command's output starts and
//!   ends (`[jobwarden: prepare: <argv>]` … `[jobwarden: prepare exited 0
//!   after 1.2s]`); without, it holds the main command's output alone.

use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::Pid;
use serde_json::json;

use super::abort_watch::AbortWatch;
use super::output::{self, SharedSink};
use super::sandbox;
use super::spawn::{self, NotStarted, Plan, Stage, Started};
use super::supervise::exit_fields;
use super::{EarlyEnd, Monitor};
use jobwarden_engine::failure::JobError;
use jobwarden_engine::terminal::Ending;
use jobwarden_model::abort;
use jobwarden_model::events::Op;
use jobwarden_model::job::JobState;
use jobwarden_model::placeholders;
use jobwarden_sys::clock::Timestamp;
use jobwarden_sys::git::{BranchState, GitWork};

/// Longest `result_ref` kept, in bytes.
const RESULT_REF_MAX: usize = 1024;

/// Bytes of a phase's stdout kept in memory at least, whatever
/// `artifact_tail_bytes` says, so that publish's last line can be found.
const PHASE_TAIL_MIN: usize = 8 * 1024;

/// Why the stages stop before the job's natural end.
pub(super) enum Stop {
    /// The job ends this way.
    End(Ending),
    /// Its record cannot be written: the monitor gives up, and the daemon
    /// finds the job `interrupted`.
    Fatal(JobError),
}

/// How one of the job's commands ended.
pub(super) struct StageEnd {
    /// The leader's exit, observed before it was reaped.
    pub(super) status: nix::Result<WaitStatus>,
    /// Why the monitor ended it early, if it did.
    pub(super) early: Option<EarlyEnd>,
    pub(super) took: Duration,
    /// Publish's last non-empty stdout line.
    pub(super) result_ref: Option<String>,
    /// CPU time the leader used, read before it was reaped.
    pub(super) cpu_used: Option<Duration>,
    /// Processes of the job the OOM killer killed while it ran (cgroup only).
    pub(super) oom_kills: u64,
}

impl Monitor<'_> {
    /// The first of the job's commands: `prepare` if the profile has one.
    pub(super) fn first_stage(&self) -> Stage {
        if self.profile.prepare.is_some() {
            Stage::Prepare
        } else {
            Stage::Run
        }
    }

    /// Does the profile run anything besides the main command? Then the
    /// log delimits each command's output.
    fn has_phases(&self) -> bool {
        self.profile.prepare.is_some() || self.profile.publish.is_some()
    }

    /// Run the job's commands in order, starting with the first stage's
    /// `planned` command; how the job ends.
    pub(super) async fn stages(
        &mut self,
        planned: Plan,
        sink: &SharedSink,
        abort_watch: &mut AbortWatch,
    ) -> Result<Ending, Stop> {
        let mut planned = Some(planned);
        if self.first_stage() == Stage::Prepare {
            let end = self
                .run_stage(Stage::Prepare, planned.take(), sink, abort_watch)
                .await?;
            self.phase_verdict(Stage::Prepare, &end)?;
        }
        let (state, reason) = match self.profile.executor.slurm().cloned() {
            Some(options) => {
                self.run_on_slurm(planned.take(), &options, sink, abort_watch)
                    .await?
            }
            None => {
                let before = self.checkout_before().await;
                let end = self
                    .run_stage(Stage::Run, planned.take(), sink, abort_watch)
                    .await?;
                self.checkout_after(before).await;
                self.verdict(Stage::Run, &end)
            }
        };
        self.after_run(state, reason, sink, abort_watch).await
    }

    /// What follows the main command's end in `state`: the job's end, or,
    /// when it succeeded, the profile's `publish` and then the end.
    pub(super) async fn after_run(
        &mut self,
        state: JobState,
        reason: Option<String>,
        sink: &SharedSink,
        abort_watch: &mut AbortWatch,
    ) -> Result<Ending, Stop> {
        if state != JobState::Succeeded || self.profile.publish.is_none() {
            return Ok(self.ending_after_run(state, reason));
        }
        let end = self
            .run_stage(Stage::Publish, None, sink, abort_watch)
            .await?;
        self.phase_verdict(Stage::Publish, &end)?;
        self.rec.result_ref = end.result_ref;
        self.events
            .append(Op::Published, json!({"result_ref": self.rec.result_ref}));
        let Some(git) = self.rec.git.clone() else {
            return Ok(self.ending(JobState::Succeeded, reason));
        };
        // Within the publish's own time, and an ABORT still honoured.
        let limit = self
            .stage_timeout(Stage::Publish)
            .min(jobwarden_sys::git::GIT_TIMEOUT);
        let checked = tokio::select! {
            r = tokio::time::timeout(limit, publish_check(&git, limit)) => Some(r),
            _ = abort_watch.fired() => None,
        };
        let Some(checked) = checked else {
            let why = self.abort_reason();
            return Ok(self.ending(JobState::Aborted, Some(why)));
        };
        let checked = checked.unwrap_or_else(|_| {
            Err(format!(
                "git did not answer within {limit:?} after the publish"
            ))
        });
        if self.merged_by_publish(checked) {
            return Ok(self.ending(JobState::Merged, Some(MERGED_BY_PUBLISH.into())));
        }
        Ok(self.ending(JobState::Succeeded, reason))
    }

    /// Did the publish merge the job's branch into its target, as git
    /// answered ([`publish_check`])? If so its merge is noted in the
    /// record. If git could not answer, the job ends `succeeded` and the
    /// reconcile asks again.
    fn merged_by_publish(&mut self, checked: Result<Option<BranchState>, String>) -> bool {
        match checked {
            Ok(Some(BranchState::Merged(merge))) => {
                self.rec.merged_at = Some(Timestamp::now());
                self.rec.merge_commit = Some(merge.commit);
                true
            }
            Ok(Some(BranchState::Open(tip))) => {
                // Kept, so that a branch deleted once merged is known so.
                if let Some(g) = self.rec.git.as_mut() {
                    g.tip = Some(tip);
                }
                false
            }
            Ok(_) => false,
            Err(e) => {
                tracing::warn!(job = %self.rec.job_id, "{e}; the job ends succeeded, and the reconcile asks git again");
                self.events.append(Op::GitCheckFailed, json!({"error": e}));
                false
            }
        }
    }

    /// Start the command of `stage` (planned now unless `planned`) and
    /// supervise it to its end.
    async fn run_stage(
        &mut self,
        stage: Stage,
        planned: Option<Plan>,
        sink: &SharedSink,
        abort_watch: &mut AbortWatch,
    ) -> Result<StageEnd, Stop> {
        let timeout = self.stage_timeout(stage);
        let oom_before = self.oom_kills();
        let child = match self.begin(stage, planned, timeout, sink) {
            Ok(child) => {
                // `begin` looked for the marker since the watch began.
                abort_watch.looked();
                child
            }
            Err(stop) => {
                self.note_not_started(stage, &stop, sink);
                return Err(stop);
            }
        };
        // A phase keeps enough of its stdout to find its last line.
        let tail_cap = match stage {
            Stage::Run => self.tail_cap(stage),
            Stage::Prepare | Stage::Publish => self.tail_cap(stage).max(PHASE_TAIL_MIN),
        };
        let mut end = self
            .supervise(child, timeout, tail_cap, sink, abort_watch)
            .await;
        end.oom_kills = self.oom_kills().saturating_sub(oom_before);
        self.record_exit(stage, &end, sink);
        let stdout = self.keep_tails(stage, sink, PHASE_TAIL_MIN);
        if stage == Stage::Publish {
            end.result_ref = result_ref(&stdout);
        }
        Ok(end)
    }

    /// No ABORT before a stage starts: else the job's end.
    pub(super) fn begin_checks(&mut self) -> Result<(), Stop> {
        // Between two stages: the watch of the one before has ended.
        if abort::requested(&self.layout, &self.rec.job_id) {
            // Before the first stage nothing has run: `cancelled`.
            let ended = self.rec.state.stopped_by_request();
            let reason = self.abort_reason();
            return Err(Stop::End(self.ending(ended, Some(reason))));
        }
        Ok(())
    }

    /// Everything up to a recorded, running process: no ABORT, a plan,
    /// the spawn, the record in the stage's state, the log's opening line.
    fn begin(
        &mut self,
        stage: Stage,
        planned: Option<Plan>,
        timeout: Duration,
        sink: &SharedSink,
    ) -> Result<Started, Stop> {
        self.begin_checks()?;
        let plan = match planned {
            Some(plan) => plan,
            None => self.plan(stage)?,
        };
        let child = self.launch(stage, &plan, timeout)?;
        if self.has_phases() {
            let argv = shown_argv(&plan.recorded_argv);
            output::lock(sink).note(&format!("{}: {argv}", stage.as_str()));
        }
        Ok(child)
    }

    /// The plan of `stage`'s command, or the job's end if it cannot run.
    /// The main command's argv becomes the job's `command`.
    pub(super) fn plan(&mut self, stage: Stage) -> Result<Plan, Stop> {
        if let Err(reason) = self.resolve_git() {
            return Err(self.start_failed(stage, NotStarted::Setup(reason)));
        }
        let job = placeholders::Job {
            layout: &self.layout,
            profile: &self.profile,
            route: self.config.route_of(&self.rec),
            rec: &self.rec,
        };
        let plan = match spawn::plan(&job, stage) {
            Ok(Some(plan)) => plan,
            Ok(None) if stage == Stage::Run => {
                let reason = NotStarted::Setup("the profile has no command".into());
                return Err(self.start_failed(stage, reason));
            }
            Ok(None) => {
                let reason = format!("the profile has no {} command", stage.as_str());
                return Err(self.start_failed(stage, NotStarted::Setup(reason)));
            }
            Err(reason) => return Err(self.start_failed(stage, reason)),
        };
        if stage == Stage::Run {
            self.rec.command = Some(plan.recorded_argv.clone());
        }
        Ok(plan)
    }

    /// The job's published work (its profile's `git`), resolved once,
    /// before its first command: a value a route capture made unusable is
    /// a setup failure naming it.
    fn resolve_git(&mut self) -> Result<(), String> {
        let Some(templates) = self.profile.git.as_ref() else {
            return Ok(());
        };
        if self.rec.git.is_some() {
            return Ok(());
        }
        let job = placeholders::Job {
            layout: &self.layout,
            profile: &self.profile,
            route: self.config.route_of(&self.rec),
            rec: &self.rec,
        };
        let (vars, _) = placeholders::vars(&job);
        let work = templates
            .resolve(&vars)
            .map_err(|e| format!("profiles.{}.{e}", self.profile.name))?;
        self.rec.git = Some(work);
        Ok(())
    }

    /// Spawn `plan` and record the job in `stage`'s state, with the
    /// process's pid and deadline. A process that no record shows is never
    /// left running.
    fn launch(&mut self, stage: Stage, plan: &Plan, timeout: Duration) -> Result<Started, Stop> {
        let mut sandbox = match self.sandbox {
            sandbox::State::On => Some(
                sandbox::prepare(&self.layout, &self.rec.job_id, &plan.workdir)
                    .map_err(|reason| self.start_failed(stage, reason))?,
            ),
            sandbox::State::Off | sandbox::State::Unavailable(_) => None,
        };
        self.affected = sandbox.as_mut().and_then(sandbox::Prepared::take_affected);
        let child = spawn::spawn(plan, &self.confinement(), sandbox)
            .map_err(|reason| self.start_failed(stage, reason))?;
        self.under_init = child.init.is_some();
        self.root_exposed |= !self.under_init;
        let pid = child.pid.as_raw();
        let to = state_of(stage);
        self.rec.pid = Some(pid);
        self.rec.pgid = Some(pid);
        self.rec.timeout_at = Some(Timestamp::now().plus(timeout));
        self.rec.heartbeat_at = Some(Timestamp::now());
        let op = match stage {
            Stage::Prepare => Op::PrepareStarted,
            Stage::Run => Op::Started,
            Stage::Publish => Op::PublishStarted,
        };
        self.restore_records();
        self.events.hold();
        let mut fields = json!({"pid": pid, "argv": plan.recorded_argv});
        if self.under_init && !child.proc_mounted {
            // The job sees the machine's /proc, whose pids are not its own.
            fields["proc"] = json!("the machine's: the kernel refused the job a /proc of its own");
        }
        self.events.append(op, fields);
        let mut recorded = self
            .rec
            .transition_on_start(&self.layout, &mut self.events, to)
            .map(|owed| self.view_owed = owed);
        // Its lines are one append (held since the containment's, or here);
        // if they cannot be written, the view is the record.
        if recorded.is_ok() && !self.events.flush() {
            recorded = self.rec.save_unsynced(&self.layout);
            self.view_owed = recorded.is_err();
        }
        if recorded.is_err() && self.rec.state == to {
            // Only the write failed: the job, already running, may have
            // removed the run folder. Put it back and write once more.
            self.restore_records();
            recorded = self.rec.save_unsynced(&self.layout);
        }
        if let Err(e) = recorded.map_err(JobError::from) {
            // Kill the group while its leader is unreaped, then fail.
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            let _ = waitpid(Pid::from_raw(pid), None);
            if e.storage_fault().is_none() {
                return Err(Stop::Fatal(e));
            }
            // Space ran out between the first write and this one. The
            // command may have begun, so it is not simply started again.
            let reason =
                format!("could not record the job as {to} ({e}); its command was killed at once");
            return Err(self.start_failed(stage, NotStarted::Other(reason)));
        }
        tracing::info!(job = %self.rec.job_id, state = %to, pid, "job {to}");
        // Told in `watch`, once the command has run a moment, when its
        // view is written too.
        self.index_owed = true;
        Ok(child)
    }

    /// The job ends because the command of `stage` cannot start (or its
    /// start could not be recorded): `setup_failed` when the setup is at
    /// fault, else `failed`.
    pub(super) fn start_failed(&mut self, stage: Stage, why: NotStarted) -> Stop {
        let why = match stage {
            Stage::Run => why,
            Stage::Prepare | Stage::Publish => {
                why.map(|r| format!("{} could not start: {r}", stage.as_str()))
            }
        };
        let (state, reason) = match why {
            NotStarted::Setup(r) => (JobState::SetupFailed, r),
            NotStarted::Other(r) => (JobState::Failed, r),
        };
        tracing::warn!(job = %self.rec.job_id, "{reason}");
        self.rec.failure_stage = Some(stage.as_str().into());
        self.events.append(
            Op::SpawnFailed,
            json!({"reason": reason, "stage": stage.as_str(), "setup": state == JobState::SetupFailed}),
        );
        Stop::End(self.ending(state, Some(reason)))
    }

    /// The timeout of `stage`: the phase's own, or the main command's.
    fn stage_timeout(&self, stage: Stage) -> Duration {
        let phase = match stage {
            Stage::Prepare => self.profile.prepare.as_ref(),
            Stage::Run => None,
            Stage::Publish => self.profile.publish.as_ref(),
        };
        phase.map_or_else(|| self.timeout(), |p| p.timeout)
    }

    /// Say how the command of `stage` ended: the `exited` event for the
    /// main command, `phase_exited` for a phase, and the closing line in
    /// the log when it delimits the stages.
    fn record_exit(&mut self, stage: Stage, end: &StageEnd, sink: &SharedSink) {
        let mut fields = exit_fields(&end.status);
        // An event that took time says when it began and how long it took.
        if let Some(map) = fields.as_object_mut() {
            let took = end.took.as_millis() as u64;
            let ended = Timestamp::now().epoch_ms();
            map.insert(
                "started_at".into(),
                json!(Timestamp::from_epoch_ms(ended.saturating_sub(took)).to_string()),
            );
            map.insert("duration_ms".into(), json!(took));
        }
        // Written with the line that follows: the end's (synced), or the
        // next stage's start.
        self.events.hold();
        if stage == Stage::Run {
            self.events.append(Op::Exited, fields);
        } else {
            if let Some(map) = fields.as_object_mut() {
                map.insert("phase".into(), json!(stage.as_str()));
            }
            self.events.append(Op::PhaseExited, fields);
        }
        if self.has_phases() {
            let why = match end.early {
                Some(EarlyEnd::Abort(_)) => " (aborted)",
                Some(EarlyEnd::Timeout(_)) => " (timed out)",
                None => "",
            };
            let line = format!(
                "{} {} after {}{why}",
                stage.as_str(),
                ended_how(&end.status),
                short_duration(end.took)
            );
            output::lock(sink).note(&line);
        }
    }

    /// A stage that never started says so in a delimited log.
    fn note_not_started(&self, stage: Stage, stop: &Stop, sink: &SharedSink) {
        if let (true, Stop::End(ending)) = (self.has_phases(), stop) {
            let line = format!(
                "{} not started ({}: {})",
                stage.as_str(),
                ending.state,
                ending.reason.as_deref().unwrap_or("")
            );
            output::lock(sink).note(&line);
        }
    }

    /// What the end of a phase means: nothing (it succeeded, the next
    /// stage runs) or the job's end.
    fn phase_verdict(&mut self, stage: Stage, end: &StageEnd) -> Result<(), Stop> {
        match self.verdict(stage, end) {
            (JobState::Succeeded, _) => Ok(()),
            (state, reason) => Err(Stop::End(self.ending(state, reason))),
        }
    }

    /// What the end of `stage`'s command means for the job. Only the main
    /// command's exit code or signal go into the record.
    fn verdict(&mut self, stage: Stage, end: &StageEnd) -> (JobState, Option<String>) {
        if stage == Stage::Run {
            match &end.status {
                Ok(WaitStatus::Exited(_, code)) => self.rec.exit_code = Some(*code),
                Ok(WaitStatus::Signaled(_, sig, _)) => {
                    self.rec.signal = Some(sig.as_str().to_owned());
                    // As shells report it: 128 + the signal's number.
                    self.rec.exit_code = Some(128 + *sig as i32);
                }
                _ => {}
            }
        }
        match &end.early {
            Some(EarlyEnd::Abort(reason)) => {
                (self.rec.state.stopped_by_request(), Some(reason.clone()))
            }
            Some(EarlyEnd::Timeout(after)) => {
                self.rec.failure_stage = Some(stage.as_str().into());
                let after = humantime::format_duration(*after);
                let reason = match stage {
                    Stage::Run => format!("timed out after {after}"),
                    Stage::Prepare | Stage::Publish => {
                        format!("{} timed out after {after}", stage.as_str())
                    }
                };
                (JobState::TimedOut, Some(reason))
            }
            None => self.verdict_on_exit(stage, end),
        }
    }

    /// What a command that ended by itself (or was killed by the kernel)
    /// means; a limit of the profile that ended it is named.
    fn verdict_on_exit(&mut self, stage: Stage, end: &StageEnd) -> (JobState, Option<String>) {
        let status = &end.status;
        let who = match stage {
            Stage::Run => "the command",
            Stage::Prepare | Stage::Publish => stage.as_str(),
        };
        let reason = match status {
            Ok(WaitStatus::Exited(_, 0)) => return (JobState::Succeeded, None),
            Ok(WaitStatus::Exited(_, code)) => format!("{who} exited with code {code}"),
            Ok(WaitStatus::Signaled(_, sig, _)) => {
                format!("{who} was killed by {}", sig.as_str())
            }
            Ok(other) => format!("{who} ended in an unexpected way: {other:?}"),
            Err(e) => format!("waiting for {who} failed: {e}"),
        };
        // keep_tails pushed this command's stderr tail last.
        let stderr = self.artifacts.last().map_or("", |a| a.text.as_str());
        let reason = self.limit_reason(stage, end, stderr).unwrap_or(reason);
        self.rec.failure_stage = Some(stage.as_str().into());
        (JobState::Failed, Some(reason))
    }
}

/// The job's state while `stage` runs.
/// What git says of `git`'s branch once its publish ended, each command
/// within `limit`.
async fn publish_check(git: &GitWork, limit: Duration) -> Result<Option<BranchState>, String> {
    let asked = [jobwarden_sys::git::Asked {
        branch: &git.branch,
        tip: None,
    }];
    jobwarden_sys::git::survey(&git.repo, git.fetch.as_deref(), &git.target, &asked, limit)
        .await
        .map(|mut states| states.remove(&git.branch))
        .map_err(|e| e.to_string())
}

/// The `state_reason` of a job whose publish merged its work.
pub const MERGED_BY_PUBLISH: &str = "publish_merged";

fn state_of(stage: Stage) -> JobState {
    match stage {
        Stage::Prepare => JobState::Preparing,
        Stage::Run => JobState::Running,
        Stage::Publish => JobState::Publishing,
    }
}

/// How a process ended, for the log's closing line.
fn ended_how(status: &nix::Result<WaitStatus>) -> String {
    match status {
        Ok(WaitStatus::Exited(_, code)) => format!("exited {code}"),
        Ok(WaitStatus::Signaled(_, sig, _)) => format!("killed by {}", sig.as_str()),
        Ok(other) => format!("ended ({other:?})"),
        Err(e) => format!("ended (waiting for it failed: {e})"),
    }
}

/// `340ms`, `1.2s`, `75.0s`: how long a command ran, for the log.
fn short_duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// An argv as one line: arguments that are empty or hold spaces or
/// quotes are quoted.
fn shown_argv(argv: &[String]) -> String {
    let plain = |a: &str| !a.is_empty() && !a.contains(|c: char| c.is_whitespace() || c == '"');
    argv.iter()
        .map(|a| {
            if plain(a) {
                a.clone()
            } else {
                format!("{a:?}")
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The last non-empty line of `stdout`, trimmed, at most
/// [`RESULT_REF_MAX`] bytes (cut at a character boundary).
fn result_ref(stdout: &str) -> Option<String> {
    let line = stdout.lines().map(str::trim).rfind(|l| !l.is_empty())?;
    let mut end = line.len().min(RESULT_REF_MAX);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    Some(line[..end].trim_end().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_ref_is_the_last_non_empty_line_trimmed() {
        let out = "pushing...\n  https://example.org/pr/7  \r\n\n   \n";
        assert_eq!(result_ref(out).as_deref(), Some("https://example.org/pr/7"));
        assert_eq!(result_ref("abc123").as_deref(), Some("abc123"));
        assert_eq!(result_ref(""), None);
        assert_eq!(result_ref("\n  \n\t\n"), None);
    }

    #[test]
    fn result_ref_is_capped_at_a_character_boundary() {
        let long = "é".repeat(RESULT_REF_MAX);
        let got = result_ref(&long).expect("a line");
        assert!(got.len() <= RESULT_REF_MAX, "{}", got.len());
        assert!(got.len() >= RESULT_REF_MAX - 1);
        assert!(got.chars().all(|c| c == 'é'));
    }

    #[test]
    fn durations_are_short() {
        assert_eq!(short_duration(Duration::from_millis(340)), "340ms");
        assert_eq!(short_duration(Duration::from_millis(1240)), "1.2s");
        assert_eq!(short_duration(Duration::from_secs(75)), "75.0s");
    }

    #[test]
    fn argv_is_shown_on_one_line_with_odd_arguments_quoted() {
        let argv: Vec<String> = ["/bin/sh", "-c", "echo hi", ""]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(shown_argv(&argv), r#"/bin/sh -c "echo hi" """#);
    }
}
