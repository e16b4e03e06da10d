//! A main command run as a Slurm batch job (profile `executor = "slurm"`,
//! see [`jobwarden_engine::slurm`]). The monitor stays its supervisor and the only
//! writer of its records; what changes is where the command runs:
//!
//! - it submits the command with `sbatch` (the record says `running`, with
//!   `slurm.job_id` null, before `sbatch` is run, so that a monitor that
//!   dies in between is followed by one that finds the job by its name);
//! - it heartbeats while Slurm says the job is pending or running, as the
//!   daemon's one poll for all Slurm jobs reports it (`slurm.json`; the
//!   monitor asks Slurm itself only when that report is stale, as when no
//!   daemon runs);
//! - it copies the batch output into `job.log` as it grows;
//! - the command's exit code comes from the batch script's own record;
//!   without one, from what Slurm says of the job's end;
//! - ABORT and the timeout: `scancel --signal=TERM --full`, then after
//!   `abort_grace` a plain `scancel`; a job still pending is cancelled at
//!   once and never starts;
//! - a monitor that finds its job already submitted (it replaces one that
//!   died) follows it from where the record left it ([`Monitor::adopt_slurm`]).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use tokio::time::{Instant, MissedTickBehavior, sleep_until};

use super::abort_watch::AbortWatch;
use super::output::{self, LogSink, SharedSink, Stream};
use super::spawn::{NotStarted, Plan, Stage};
use super::stages::Stop;
use super::{EarlyEnd, Monitor, Outcome};
use jobwarden_engine::failure::JobError;
use jobwarden_engine::slurm::{self, QueueEntry, QueueFile, SlurmRecord};
use jobwarden_model::abort;
use jobwarden_model::config::SlurmOptions;
use jobwarden_model::events::Op;
use jobwarden_model::job::{Durable, JobState};
use jobwarden_model::layout::Layout;
use jobwarden_sys::clock::Timestamp;
use jobwarden_sys::{fsio, procfs};

mod ending;

/// How often the batch output and the script's records are looked at.
const FOLLOW_EVERY: Duration = Duration::from_millis(200);
/// Bytes of batch output copied at a time.
const CHUNK: u64 = 1 << 20;
/// Once Slurm says the job ended, how long its exit record is waited for
/// (it may reach a shared filesystem late).
const RECORD_LAG: Duration = Duration::from_secs(3);
/// How long a job Slurm no longer knows is waited for before it is lost.
const UNKNOWN_FOR: Duration = Duration::from_secs(10);
/// After the final `scancel`, how long the job is given to end before the
/// monitor ends it anyway, saying Slurm still lists it.
const CANCEL_PATIENCE: Duration = Duration::from_secs(60);

/// What Slurm said of the job, by the freshest word there is.
enum Word {
    Known(QueueEntry),
    /// Slurm was asked, and does not know the job.
    Unknown,
    /// Nobody could ask (the controller unreachable): keep waiting.
    Silent,
}

impl Monitor<'_> {
    /// Submit the main command (`planned`, or planned now) to Slurm and
    /// follow it to its end: the job's state after it, and why.
    pub(super) async fn run_on_slurm(
        &mut self,
        planned: Option<Plan>,
        options: &SlurmOptions,
        sink: &SharedSink,
        abort_watch: &mut AbortWatch,
    ) -> Result<(JobState, Option<String>), Stop> {
        // Slurm runs it outside the sandbox, maybe on this machine.
        self.root_exposed = true;
        self.begin_checks()?;
        let plan = match planned {
            Some(plan) => plan,
            None => self.plan(Stage::Run)?,
        };
        let (root, dir) = self
            .layout
            .slurm_batch_dir(&self.rec.job_id, options.batch_dir.as_deref());
        let stdin = self
            .write_batch_folder(&root, &dir, &plan)
            .map_err(|why| self.start_failed(Stage::Run, NotStarted::Other(why)))?;
        let timeout = self.timeout();
        self.rec.slurm = Some(SlurmRecord {
            job_id: None,
            name: slurm::job_name(&self.rec.job_id),
            batch_dir: dir.display().to_string(),
            submitted_at: Timestamp::now(),
            state: None,
            reason: None,
            node: None,
            started_at: None,
            ended_at: None,
            pending_ms: None,
            run_ms: None,
            output_bytes: 0,
        });
        self.rec.timeout_at = Some(Timestamp::now().plus(timeout));
        self.rec.heartbeat_at = Some(Timestamp::now());
        self.events.append(
            Op::Started,
            json!({"argv": plan.recorded_argv, "executor": "slurm", "batch_dir": dir}),
        );
        // A Slurm job's start takes longer than its view is owed for.
        let recorded = self
            .rec
            .transition_on_start(&self.layout, &mut self.events, JobState::Running)
            .map(|owed| self.view_owed = owed);
        if let Err(e) = recorded {
            return Err(Stop::Fatal(e.into()));
        }
        if !self.events.flush() {
            // Its lines could not be written: the view is the record.
            self.view_owed = true;
        }
        self.write_owed_view();
        let mut env = plan.env().to_vec();
        env.push(("JOBWARDEN_SLURM_DIR".into(), dir.clone().into_os_string()));
        if let Some(stdin) = &stdin {
            env.push((
                "JOBWARDEN_SLURM_STDIN".into(),
                stdin.clone().into_os_string(),
            ));
        }
        let submission = slurm::Submission {
            job: &self.rec.job_id,
            dir: &dir,
            cwd: &plan.cwd,
            argv: &plan.argv,
            env: &env,
            time_limit: timeout + Duration::from_secs(60),
        };
        let submitted = tokio::select! {
            r = slurm::submit(&submission, options) => r,
            () = abort_watch.fired() => {
                // Nothing was submitted that the record knows of; a
                // submission under way (`sbatch` is killed as its future
                // is dropped) is cancelled by name, twice, in case it
                // landed after the first.
                self.cancel_by_name().await;
                tokio::time::sleep(Duration::from_secs(2)).await;
                self.cancel_by_name().await;
                let reason = self.abort_reason();
                return Ok((JobState::Aborted, Some(reason)));
            }
        };
        match submitted {
            Ok(id) => self.submitted(id),
            Err(e) => {
                // A submission that failed late (it hung, or printed no
                // id) may still have reached Slurm.
                if !matches!(e, slurm::ClientError::Missing(_)) {
                    self.cancel_by_name().await;
                }
                let why = format!("submitting to Slurm: {e}");
                return Err(self.start_failed(Stage::Run, NotStarted::Setup(why)));
            }
        }
        self.index_owed = true;
        Ok(self.follow_slurm(sink, abort_watch).await)
    }

    /// Write the batch script (and, in a `batch_dir` of the profile's, the
    /// prompt the command reads) into the job's batch folder; the prompt's
    /// path for the script.
    fn write_batch_folder(
        &self,
        root: &std::path::Path,
        dir: &std::path::Path,
        plan: &Plan,
    ) -> Result<Option<PathBuf>, String> {
        let say =
            |e: jobwarden_sys::error::IoError| format!("preparing the Slurm batch folder: {e}");
        fsio::create_dirs(root, dir).map_err(say)?;
        fsio::write_atomic(root, &Layout::slurm_script(dir), slurm::WRAPPER.as_bytes())
            .map_err(say)?;
        let Some(stdin) = plan.stdin() else {
            return Ok(None);
        };
        if root == self.layout.root() {
            return Ok(Some(stdin.to_path_buf()));
        }
        let (bytes, _) = fsio::read_capped(self.layout.root(), stdin, self.config.max_prompt_bytes)
            .map_err(say)?;
        let copy = dir.join("prompt.md");
        fsio::write_atomic(root, &copy, &bytes).map_err(say)?;
        Ok(Some(copy))
    }

    /// Note Slurm's id for the job, durably (a journal line): a monitor
    /// after a power cut follows the Slurm job by it.
    fn submitted(&mut self, id: String) {
        tracing::info!(job = %self.rec.job_id, slurm_job_id = %id, "submitted to Slurm");
        let fields = json!({"slurm_job_id": id});
        if let Some(s) = self.rec.slurm.as_mut() {
            s.job_id = Some(id);
        }
        let (layout, events) = (&self.layout, &mut self.events);
        let noted = self
            .rec
            .journal(layout, events, Op::SlurmSubmitted, fields, Durable(true));
        if let Err(e) = noted {
            tracing::warn!(job = %self.rec.job_id, "{e}; the next heartbeat writes it");
        }
    }

    /// Cancel the Slurm job of this job's name, if Slurm has one.
    async fn cancel_by_name(&mut self) {
        if let Err(e) = slurm::cancel(&self.rec.job_id, None).await {
            tracing::warn!(job = %self.rec.job_id, "cancelling its Slurm job: {e}");
        }
    }

    /// Take over a job whose main command was submitted to Slurm by a
    /// monitor that is gone: follow it from where its record left it, then
    /// end it as the first monitor would have.
    pub(super) async fn adopt_slurm(&mut self) -> Result<Outcome, JobError> {
        self.root_exposed = true;
        let id = self.rec.job_id.clone();
        let me = std::process::id() as i32;
        self.rec.monitor_pid = Some(me);
        self.rec.monitor_start_time = procfs::own_start_time();
        self.rec.monitor_exe = procfs::own_exe();
        self.rec.heartbeat_at = Some(Timestamp::now());
        self.trust_only_its_own_batch_dir();
        self.rec.save(&self.layout)?;
        tracing::info!(job = %id, "following its Slurm job again (its monitor was gone)");
        self.events.append(
            Op::Adopted,
            json!({"slurm_job_id": self.rec.slurm.as_ref().and_then(|s| s.job_id.clone())}),
        );
        let log = fsio::open_append(self.layout.root(), &self.layout.job_log(&id))?;
        let sink = LogSink::new(log, self.config.max_log_bytes);
        self.log = Some(sink.clone());
        let mut abort_watch =
            AbortWatch::start(&self.layout.run_dir(&id), self.layout.abort_marker(&id));
        let (state, reason) = self.follow_slurm(&sink, &mut abort_watch).await;
        let ending = self.after_run(state, reason, &sink, &mut abort_watch).await;
        abort_watch.stop();
        let ending = match ending {
            Ok(ending) | Err(Stop::End(ending)) => ending,
            Err(Stop::Fatal(e)) => return Err(e),
        };
        let ending = self.with_lost_output(ending, &sink);
        self.end_with(ending)
    }

    /// A record a job may have written names its Slurm job and its batch
    /// folder: the name is always the job's own, and the folder one this
    /// job's profile could have given it (its run folder, or its own under
    /// the profile's `batch_dir`), else its run folder.
    fn trust_only_its_own_batch_dir(&mut self) {
        let id = self.rec.job_id.clone();
        let shared = self
            .profile
            .executor
            .slurm()
            .and_then(|o| o.batch_dir.as_deref());
        let (_, own) = self.layout.slurm_batch_dir(&id, shared);
        let (_, run_dir) = self.layout.slurm_batch_dir(&id, None);
        let Some(s) = self.rec.slurm.as_mut() else {
            return;
        };
        s.name = slurm::job_name(&id);
        let recorded = PathBuf::from(&s.batch_dir);
        if recorded != run_dir && recorded != own {
            tracing::warn!(job = %id, "its record names {} as its Slurm batch folder, which is not one of its own; its run folder is used", recorded.display());
            s.batch_dir = run_dir.display().to_string();
        }
    }

    /// Heartbeat, copy the output, honour ABORT and the timeout, until the
    /// job ends in Slurm: the job's state and why.
    async fn follow_slurm(
        &mut self,
        sink: &SharedSink,
        abort_watch: &mut AbortWatch,
    ) -> (JobState, Option<String>) {
        let period = self.config.heartbeat_interval;
        let mut heartbeat = tokio::time::interval_at(Instant::now() + period, period);
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut follow = tokio::time::interval(FOLLOW_EVERY);
        follow.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let left = self
            .rec
            .timeout_at
            .map(|t| t.epoch_ms().saturating_sub(Timestamp::now().epoch_ms()))
            .map_or(self.timeout(), Duration::from_millis);
        let deadline = sleep_until(Instant::now() + left);
        tokio::pin!(deadline);
        let mut early: Option<EarlyEnd> = None;
        let mut kill_at: Option<Instant> = None;
        let mut give_up_at: Option<Instant> = None;
        let mut asked = AskedAt::default();
        loop {
            tokio::select! {
                _ = follow.tick() => {
                    if let Some(end) = self.look(sink, &early, &mut asked).await {
                        return end;
                    }
                }
                _ = heartbeat.tick() => {
                    if early.is_none() && abort::requested(&self.layout, &self.rec.job_id) {
                        early = Some(EarlyEnd::Abort(self.abort_reason()));
                        kill_at = Some(self.stop_slurm_job(sink).await);
                    }
                    self.heartbeat(sink);
                }
                () = abort_watch.fired(), if early.is_none() => {
                    early = Some(EarlyEnd::Abort(self.abort_reason()));
                    kill_at = Some(self.stop_slurm_job(sink).await);
                }
                () = &mut deadline, if early.is_none() => {
                    let after = humantime::format_duration(left).to_string();
                    self.events.append(Op::Timeout, json!({"after": after, "while": self.rec.state}));
                    early = Some(EarlyEnd::Timeout(self.timeout()));
                    kill_at = Some(self.stop_slurm_job(sink).await);
                }
                () = sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() => {
                    kill_at = None;
                    let id = self.slurm_id().unwrap_or_default();
                    output::lock(sink).note(&format!("scancel {id}"));
                    self.cancel_by_name().await;
                    give_up_at = Some(Instant::now() + CANCEL_PATIENCE);
                }
                () = sleep_until(give_up_at.unwrap_or_else(Instant::now)), if give_up_at.is_some() => {
                    self.copy_output(sink);
                    let still = "; Slurm still lists it after its final scancel";
                    return match early {
                        Some(EarlyEnd::Timeout(after)) => (JobState::TimedOut, Some(format!("timed out after {}{still}", humantime::format_duration(after)))),
                        Some(EarlyEnd::Abort(why)) => (JobState::Aborted, Some(format!("{why}{still}"))),
                        None => (JobState::Failed, Some(format!("cancelled{still}"))),
                    };
                }
            }
        }
    }

    /// Slurm's id for the job, once known.
    fn slurm_id(&self) -> Option<String> {
        self.rec.slurm.as_ref().and_then(|s| s.job_id.clone())
    }

    /// One look: the output copied, the script's records read, Slurm's
    /// word taken. The job's end, once there is one.
    async fn look(
        &mut self,
        sink: &SharedSink,
        early: &Option<EarlyEnd>,
        asked: &mut AskedAt,
    ) -> Option<(JobState, Option<String>)> {
        self.copy_output(sink);
        let dir = PathBuf::from(self.rec.slurm.as_ref()?.batch_dir.clone());
        self.note_started(&dir);
        let exited = || slurm::read_record::<slurm::Exited>(&Layout::slurm_exit(&dir));
        let Some(id) = self.slurm_id() else {
            if let Some(exited) = exited() {
                return Some(self.exited_on_slurm(&exited, early, sink));
            }
            return self.look_for_submission(asked).await;
        };
        if !asked.record_seen && exited().is_some() {
            // The command's end is recorded: Slurm's word on it, which may
            // also say the job goes on (a record the job wrote itself).
            asked.record_seen = true;
            if self.settled_in_slurm().await != Some(false) {
                self.copy_output(sink);
                let exited = exited()?;
                return Some(self.exited_on_slurm(&exited, early, sink));
            }
        }
        let ours = slurm::job_name(&self.rec.job_id);
        match self.word(&id, asked).await {
            Word::Known(entry) if entry.name != ours => {
                // Not ours: an id reused by the cluster, or a forged record.
                // Ours is found by its name (at most once a poll interval).
                if asked
                    .by_name
                    .is_none_or(|at| at.elapsed() >= self.config.slurm_poll_interval)
                {
                    tracing::warn!(job = %self.rec.job_id, "Slurm job {id} is named {:?}, not ours; it is left alone", entry.name);
                    asked.by_name = Some(Instant::now());
                    self.follow_by_name(&id).await;
                }
                let since = *asked.unknown_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= UNKNOWN_FOR {
                    return Some(self.lost(&id, early));
                }
            }
            Word::Known(entry) => {
                asked.unknown_since = None;
                if let Some(s) = self.rec.slurm.as_mut() {
                    jobwarden_engine::slurm::saw(s, &entry);
                }
                if !entry.state.is_active() {
                    let since = *asked.ended_since.get_or_insert_with(Instant::now);
                    if let Some(exited) = exited() {
                        self.copy_output(sink);
                        return Some(self.exited_on_slurm(&exited, early, sink));
                    }
                    if since.elapsed() >= RECORD_LAG {
                        self.copy_output(sink);
                        return Some(self.ended_in_slurm(&id, &entry, early).await);
                    }
                }
            }
            Word::Unknown => {
                let since = *asked.unknown_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= UNKNOWN_FOR {
                    if self.follow_by_name(&id).await {
                        asked.unknown_since = None;
                        return None;
                    }
                    self.copy_output(sink);
                    if let Some(exited) = exited() {
                        return Some(self.exited_on_slurm(&exited, early, sink));
                    }
                    return Some(match slurm::show(&id).await {
                        Ok(Some(entry)) if entry.name == ours && entry.state.is_active() => {
                            // Slurm's poll missed it; the controller knows it.
                            asked.unknown_since = None;
                            if let Some(s) = self.rec.slurm.as_mut() {
                                jobwarden_engine::slurm::saw(s, &entry);
                            }
                            return None;
                        }
                        Ok(Some(entry)) if entry.name == ours => {
                            self.ended_in_slurm(&id, &entry, early).await
                        }
                        _ => self.lost(&id, early),
                    });
                }
            }
            Word::Silent => {}
        }
        None
    }

    /// A record without Slurm's id (its monitor died while `sbatch` ran):
    /// look for the job by its name, once a poll interval. If Slurm has
    /// none for [`UNKNOWN_FOR`], the job ends `interrupted`, and is not
    /// retried on its own: nothing proves that `sbatch` did not submit it
    /// after all, and the operator decides.
    async fn look_for_submission(
        &mut self,
        asked: &mut AskedAt,
    ) -> Option<(JobState, Option<String>)> {
        if asked
            .by_name
            .is_some_and(|at| at.elapsed() < self.config.slurm_poll_interval)
        {
            return None;
        }
        asked.by_name = Some(Instant::now());
        match slurm::find(&self.rec.job_id).await {
            Ok(Some(found)) => {
                self.submitted(found);
                None
            }
            Ok(None) => {
                let since = *asked.unknown_since.get_or_insert_with(Instant::now);
                if since.elapsed() < UNKNOWN_FOR {
                    return None;
                }
                self.keep_archived = true;
                self.rec.failure_stage = Some(Stage::Run.as_str().into());
                let name = slurm::job_name(&self.rec.job_id);
                let ran = self
                    .rec
                    .slurm
                    .as_ref()
                    .is_some_and(|s| s.started_at.is_some());
                let why = if ran {
                    format!(
                        "its command started in Slurm, and Slurm no longer knows a job named {name}; not retried on its own"
                    )
                } else {
                    format!(
                        "its monitor stopped while submitting it to Slurm, and Slurm has no job named {name}; not retried on its own, in case it was submitted after all (retry it once `squeue -n {name}` shows nothing)"
                    )
                };
                Some((JobState::Interrupted, Some(why)))
            }
            Err(e) => {
                if !asked.said_silent {
                    tracing::warn!(job = %self.rec.job_id, "looking for its Slurm job: {e}; asking again");
                    asked.said_silent = true;
                }
                None
            }
        }
    }

    /// Slurm's job of this job's name, when it is not `id` (the id the
    /// record gave): followed from now on. True if there is one.
    async fn follow_by_name(&mut self, id: &str) -> bool {
        match slurm::find(&self.rec.job_id).await {
            Ok(Some(found)) if found != id => {
                tracing::warn!(job = %self.rec.job_id, "its record named Slurm job {id}; its Slurm job is {found}, followed from now on");
                self.events.append(
                    Op::Adopted,
                    json!({"slurm_job_id": found, "recorded_slurm_job_id": id}),
                );
                if let Some(s) = self.rec.slurm.as_mut() {
                    s.job_id = Some(found);
                }
                if let Err(e) = self.rec.save(&self.layout) {
                    tracing::warn!(job = %self.rec.job_id, "{e}; the next heartbeat writes it");
                }
                true
            }
            _ => false,
        }
    }

    /// What Slurm says of job `id`: the daemon's last poll when it is
    /// fresh and asked about it, else this monitor's own question (at most
    /// once a poll interval).
    async fn word(&mut self, id: &str, asked: &mut AskedAt) -> Word {
        let every = self.config.slurm_poll_interval;
        let fresh = (every * 3).max(Duration::from_secs(2));
        let now = Timestamp::now().epoch_ms();
        if let Some(q) = QueueFile::read(self.layout.root(), &self.layout.slurm_queue()) {
            let recent = now.saturating_sub(q.polled_at_ms) <= fresh.as_millis() as u64;
            if recent && q.asked.iter().any(|a| a == id) {
                return match (q.jobs.get(id), &q.error) {
                    (Some(e), _) => Word::Known(e.clone()),
                    (None, None) => Word::Unknown,
                    (None, Some(_)) => Word::Silent,
                };
            }
        }
        if asked.own.is_some_and(|at| at.elapsed() < every) {
            return Word::Silent;
        }
        asked.own = Some(Instant::now());
        match slurm::poll(&[id.to_owned()]).await {
            Ok(jobs) => jobs.get(id).cloned().map_or(Word::Unknown, Word::Known),
            Err(e) => {
                if !asked.said_silent {
                    tracing::warn!(job = %self.rec.job_id, "asking Slurm about job {id}: {e}; the job is followed on");
                    asked.said_silent = true;
                }
                Word::Silent
            }
        }
    }

    /// Note the command's start once the batch script recorded it.
    fn note_started(&mut self, dir: &std::path::Path) {
        if self
            .rec
            .slurm
            .as_ref()
            .is_none_or(|s| s.started_at.is_some())
        {
            return;
        }
        let Some(started) = slurm::read_record::<slurm::Started>(&Layout::slurm_started(dir))
        else {
            return;
        };
        if let Some(s) = self.rec.slurm.as_mut() {
            s.started(started.started_at, Some(started.host.clone()));
        }
        self.events.append(
            Op::SlurmStarted,
            json!({"node": started.host, "pending_ms": self.rec.slurm.as_ref().and_then(|s| s.pending_ms)}),
        );
    }

    /// Copy what the batch output gained into `job.log`, and say in the
    /// record at once how far it was copied: a monitor that follows the
    /// job after this one died copies from there (a death between the two
    /// writes copies that chunk twice).
    fn copy_output(&mut self, sink: &SharedSink) {
        use std::io::{Read, Seek, SeekFrom};
        let Some(s) = self.rec.slurm.as_ref() else {
            return;
        };
        let dir = PathBuf::from(&s.batch_dir);
        let path = Layout::slurm_output(&dir);
        let Ok(mut file) = fsio::open_file(&dir, &path) else {
            return;
        };
        let mut at = s.output_bytes;
        let len = file.metadata().map(|m| m.len()).unwrap_or(at);
        if len < at {
            // The job cut its output file: from its start again, said.
            output::lock(sink).note(&format!(
                "{} was cut from {at} to {len} bytes; copied again from its start",
                path.display()
            ));
            at = 0;
        }
        let tail = self.tail_cap(Stage::Run);
        loop {
            if file.seek(SeekFrom::Start(at)).is_err() {
                return;
            }
            let mut chunk = Vec::new();
            match (&mut file).take(CHUNK).read_to_end(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    output::lock(sink).write(Stream::Stdout, &chunk, tail);
                    at += n as u64;
                }
            }
        }
        let moved = self
            .rec
            .slurm
            .as_ref()
            .is_some_and(|s| s.output_bytes != at);
        if let Some(s) = self.rec.slurm.as_mut() {
            s.output_bytes = at;
        }
        if moved {
            self.sync_log_fields(sink);
            if let Err(e) = self.rec.save_unsynced(&self.layout) {
                tracing::debug!(job = %self.rec.job_id, "{e}; the next heartbeat writes it");
            }
        }
    }

    /// Stop the job in Slurm, for an ABORT or the timeout: a job not yet
    /// started is cancelled outright; a running one gets SIGTERM (its
    /// script and every step). When to cancel it for good.
    async fn stop_slurm_job(&mut self, sink: &SharedSink) -> Instant {
        let at = Instant::now() + self.config.abort_grace;
        let Some(id) = self.slurm_id() else {
            self.cancel_by_name().await;
            return at;
        };
        if let Some(dir) = self.rec.slurm.as_ref().map(|s| PathBuf::from(&s.batch_dir)) {
            self.note_started(&dir);
        }
        let started = self.rec.slurm.as_ref().is_some_and(|s| {
            s.started_at.is_some() || s.state.as_ref().is_some_and(|st| !st.is_pending())
        });
        let signal = started.then_some("TERM");
        let line = match signal {
            Some(sig) => format!("scancel --signal={sig} --full {id}"),
            None => format!("scancel {id} (not started yet)"),
        };
        output::lock(sink).note(&line);
        if let Err(e) = slurm::cancel(&self.rec.job_id, signal).await {
            tracing::warn!(job = %self.rec.job_id, "{line}: {e}");
        }
        at
    }
}

/// When the monitor last asked Slurm itself, and since when Slurm has not
/// known the job or has said it ended.
#[derive(Default)]
struct AskedAt {
    own: Option<Instant>,
    unknown_since: Option<Instant>,
    ended_since: Option<Instant>,
    /// When Slurm was last asked for the job by its name.
    by_name: Option<Instant>,
    /// The batch script's exit record was seen (Slurm then asked once).
    record_seen: bool,
    said_silent: bool,
}
