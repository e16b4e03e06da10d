//! jobwarden-monitor: the per-job monitor process (`jobwarden monitor <job>`),
//! started by the daemon in its own session so that jobs outlive daemon
//! restarts (the conmon / containerd-shim pattern). From its start it is the
//! only writer of its job's `job.json`: it runs the job's commands each in
//! its own process group, streams their output to `job.log`, heartbeats,
//! honours `ABORT` and each one's timeout, records the outcome, archives the
//! prompt and exits. It never needs the daemon: it outlives it.
//!
//! Abort and timeout escalate the same way: SIGTERM to the group and to
//! every other process the job started, `abort_grace`, then SIGKILL. The
//! leader is observed exiting with `waitid(WNOWAIT)` and reaped only after
//! its group has been killed, so its pgid cannot have been recycled when we
//! signal it. Then whatever the command left is killed, its cgroup at once
//! or each of the monitor's descendants: nothing a job started outlives it.
//!
//! - `stages.rs` — prepare, main command, publish: their order and verdicts.
//! - `supervise.rs` — one command supervised: its exit, heartbeats, ABORT, the timeout, the kill.
//! - [`spawn`] — a command's plan (argv, environment, stdin, working folder) and its start.
//! - [`sandbox`] — the job's sandbox: the folders it may write, its pipes.
//! - `contain.rs` — cgroup or process tree: everything a job started killed; limit verdicts.
//! - `output.rs` — the live, capped log.
//! - `abort_watch.rs` — the ABORT marker, watched on the monitor's one inotify instance.
//! - `slurm.rs` — the main command as a Slurm batch job; `slurm/ending.rs` its end.
//! - `restore.rs` — the monitor's own files kept in place while its job runs.
//! - `changed.rs` — the files the main command changed in its git checkout, found without it.

mod abort_watch;
mod changed;
mod contain;
mod output;
mod restore;
pub mod sandbox;
mod slurm;
pub mod spawn;
mod stages;
mod supervise;

use std::time::Duration;

use serde_json::json;

use jobwarden_engine::failure::JobError;
use jobwarden_engine::handover;
use jobwarden_engine::terminal::{Ending, Finisher, Handed};
use jobwarden_ledger::{Artifact, Ledger, PathRelation};
use jobwarden_model::abort;
use jobwarden_model::config::{Config, Profile};
use jobwarden_model::events::{EventLog, Op};
use jobwarden_model::job::{JobId, JobRecord, JobState};
use jobwarden_model::layout::Layout;
use jobwarden_sys::clock::Timestamp;
use jobwarden_sys::{fsio, memory, procfs, storage};

use abort_watch::AbortWatch;
use contain::Containment;
use output::{LogSink, SharedSink};
use spawn::Stage;
use stages::Stop;

/// Longest `affected` list read from a job.
const AFFECTED_MAX_BYTES: u64 = 1 << 20;

/// How a monitor ended.
#[derive(Debug)]
pub enum Outcome {
    /// The job reached this terminal state; with what is handed over to the
    /// daemon, if only its record was written (see `terminal.rs`).
    Finished(JobState, Option<Handed>),
    /// Another monitor holds the job; nothing was done.
    AlreadySupervised,
    /// The root's storage refused the first writes; the job is still
    /// queued, nothing of it ran. The daemon starts it again later.
    NoStorage(String),
}

/// Why the monitor is ending the job early.
#[derive(Debug, Clone)]
enum EarlyEnd {
    Abort(String),
    Timeout(Duration),
}

/// Supervise job `id` to its end. Must run on a current-thread runtime
/// (see [`spawn::spawn`]). With `hand_over`, an end whose prompt is
/// archived whatever the ledger says is recorded in `job.json` alone, and
/// the rest handed over to the daemon (see `terminal.rs`).
pub async fn run(
    layout: Layout,
    config: &Config,
    id: JobId,
    hand_over: bool,
) -> Result<Outcome, JobError> {
    supervise::become_subreaper();
    let Some(lock) = fsio::try_lock_dir(layout.root(), &layout.monitor_lock(&id))? else {
        return Ok(Outcome::AlreadySupervised);
    };
    jobwarden_sys::fault::pause("monitor-locked");
    if let Err(e) = jobwarden_engine::shared_inbox::renew(&layout, config) {
        tracing::warn!(job = %id, "renewing the host's lease in the shared inbox: {e}");
    }
    // The record is read through the job's own events handle, which then
    // appends without reading the journal again.
    let mut events = EventLog::open(layout.root(), &layout.events(&id), true);
    let (rec, _) = JobRecord::load_job_logged(&layout, &id, &mut events)?;
    events.set_enabled(config.events_for(&rec));
    if rec.state == JobState::Running && rec.slurm.is_some() {
        // Its main command runs in Slurm, and its monitor is gone: follow it.
        let mut job = Monitor::new(layout, config, rec, events, hand_over, lock);
        if job.profile.executor.slurm().is_none() {
            tracing::warn!(job = %id, "its profile no longer runs jobs on Slurm; the job submitted there is followed to its end");
        }
        return job.adopt_slurm().await;
    }
    if rec.state != JobState::Queued {
        return Err(JobError::BadRecord {
            path: layout.job_json(&id),
            reason: format!(
                "job is {}, and a monitor only starts a queued job",
                rec.state
            ),
        });
    }
    let missing = config.profile_of(&rec).err();
    let mut job = Monitor::new(layout, config, rec, events, hand_over, lock);
    if let Some(why) = missing {
        let stop = job.start_failed(Stage::Run, spawn::NotStarted::Setup(why));
        return job.stopped(stop);
    }
    job.start().await
}

/// How long a command has run before the job index is told of its state.
/// Opening the ledger and writing the row takes the monitor's one thread
/// for a millisecond or two: not while the command is just starting (an
/// `ABORT` then would wait), and not at all for a command over sooner, whose
/// end is indexed anyway. Until then the index says `queued`: a job that
/// started less than this ago is counted and filtered (`jobs --state`) as
/// queued, though each row shown is shown as its `job.json` says. The
/// view of the record, `job.json`, is owed as long: until then it is the
/// journal's last line that says what the job is doing, and a command over
/// sooner has its view written once, at its end.
const INDEX_AFTER: Duration = jobwarden_model::job::VIEW_OWED_FOR;

/// Room reserved in a job's journal before it starts: the lines of a
/// command's start and end (each journal line a copy of the record, about
/// 2 KiB; a whole short job's `events.jsonl` is about 6 KiB). Kept small:
/// what is not used stays allocated to the file until it is pruned.
const JOURNAL_ROOM: u64 = 8 * 1024;

struct Monitor<'a> {
    layout: Layout,
    config: &'a Config,
    profile: Profile,
    rec: JobRecord,
    events: EventLog,
    /// The last heartbeat could not be written (reported once).
    heartbeat_failing: bool,
    /// The host's lease in the shared inbox could not be renewed (reported
    /// once).
    lease_failing: bool,
    /// The job index has not been told of the state the job is in (see
    /// [`INDEX_AFTER`]).
    index_owed: bool,
    /// `job.json` is behind the journal's last line (see [`INDEX_AFTER`]).
    view_owed: bool,
    /// Hand the end over to the daemon when the ledger cannot change it.
    hand_over: bool,
    /// What was handed over, once the end is recorded that way.
    handed: Option<Handed>,
    /// The output tails of each of the job's commands that ran, for the
    /// ledger.
    artifacts: Vec<Artifact>,
    /// What holds the job's processes (chosen when it starts).
    containment: Containment,
    /// Whether its local commands run sandboxed (chosen when it starts).
    sandbox: sandbox::State,
    /// The command running now runs under the sandbox's init, which
    /// passes every signal on to all of its processes.
    under_init: bool,
    /// A command of the job ran where it could write the root (not in the
    /// sandbox, or in Slurm): what it may have removed is put back before
    /// each write (`restore.rs`). A sandboxed command sees the root
    /// read-only and can remove nothing of the monitor's.
    root_exposed: bool,
    /// The job's monitor lock (on its run folder), held by its descriptor
    /// for the monitor's whole life, whatever becomes of the folder; then
    /// the locks on every run folder put back after the job removed or
    /// replaced it.
    locks: Vec<nix::fcntl::Flock<std::fs::File>>,
    /// Where the job's output goes, once it is open (reopened by the
    /// restore pass if the job removes it).
    log: Option<SharedSink>,
    /// No other attempt may start, whatever the retry policy says:
    /// something of this one may still run (a Slurm submission nothing
    /// proves did not happen).
    keep_archived: bool,
    /// The job's `affected` as its last sandboxed command's sandbox bound
    /// it (see [`sandbox::Prepared::take_affected`]); `None` when that
    /// command ran unsandboxed, and the file is read by its path.
    affected: Option<std::fs::File>,
    /// The files the main command changed in its git checkout
    /// (`changed.rs`), absolute.
    changed: Vec<String>,
}

impl<'a> Monitor<'a> {
    /// The monitor of `rec`, appending to its `events`, holding its
    /// `lock`; its profile, or the default one when it is gone (the caller
    /// says so).
    fn new(
        layout: Layout,
        config: &'a Config,
        rec: JobRecord,
        events: EventLog,
        hand_over: bool,
        lock: nix::fcntl::Flock<std::fs::File>,
    ) -> Self {
        let profile = config
            .profile_of(&rec)
            .unwrap_or_else(|_| config.default_profile())
            .clone();
        Monitor {
            layout,
            config,
            profile,
            rec,
            events,
            heartbeat_failing: false,
            lease_failing: false,
            index_owed: false,
            view_owed: false,
            hand_over,
            handed: None,
            artifacts: Vec::new(),
            containment: Containment::ProcessTree,
            sandbox: sandbox::State::Off,
            under_init: false,
            root_exposed: false,
            locks: vec![lock],
            log: None,
            keep_archived: false,
            affected: None,
            changed: Vec::new(),
        }
    }
}

impl Monitor<'_> {
    async fn start(&mut self) -> Result<Outcome, JobError> {
        let id = self.rec.job_id.clone();
        let me = procfs::own_pid();
        self.rec.monitor_pid = Some(me);
        self.rec.monitor_start_time = procfs::own_start_time();
        self.rec.monitor_exe = procfs::own_exe();
        self.rec.log_path = Some(
            self.layout
                .relative(&self.layout.job_log(&id))
                .to_string_lossy()
                .into_owned(),
        );
        let mut abort_watch =
            AbortWatch::start(&self.layout.run_dir(&id), self.layout.abort_marker(&id));
        if abort::requested(&self.layout, &id) {
            self.events
                .append(Op::AbortRequested, json!({"while": "queued"}));
            // Nothing of it ran: `cancelled` (see `JobState::stopped_by_request`).
            let ended = self.rec.state.stopped_by_request();
            return self.end(ended, Some(abort::reason(&self.layout, &id, ended)));
        }
        if let Some(why) = jobwarden_engine::shared_inbox::taken(&self.layout, &self.rec) {
            // Another host took the claim while this host was silent: the
            // prompt runs there, never here too.
            tracing::warn!(job = %id, "{why}; it does not run here");
            return self.end(JobState::Interrupted, Some(why));
        }
        if let Err(e) = self.create_workdir() {
            if storage::fault_of(&e.source).is_some() {
                tracing::warn!(job = %id, "{e}; the job stays queued");
                return Ok(Outcome::NoStorage(e.to_string()));
            }
            let why = spawn::NotStarted::Other(e.to_string());
            let stop = self.start_failed(self.first_stage(), why);
            return self.stopped(stop);
        }
        let plan = match self.plan(self.first_stage()) {
            Ok(plan) => plan,
            Err(stop) => return self.stopped(stop),
        };
        self.rec.workdir = Some(plan.workdir.display().to_string());
        // Write before anything runs: if the disk is full or read-only,
        // the job stays queued, untouched, and starts when it can.
        let log_path = self.layout.job_log(&id);
        let log = self.save_with_claim().and_then(|()| {
            jobwarden_sys::fault::pause("monitor-started");
            Ok(fsio::open_append_len(self.layout.root(), &log_path)?)
        });
        let (log, log_len) = match log {
            Ok(opened) => opened,
            Err(e) if e.storage_fault().is_some() => {
                tracing::warn!(job = %id, "{e}; the job stays queued");
                return Ok(Outcome::NoStorage(e.to_string()));
            }
            Err(e) => return Err(e),
        };
        let sink = LogSink::opened(log, log_len, self.config.max_log_bytes);
        self.log = Some(sink.clone());
        // Stamped before the first fork, so the recorded run time covers
        // all of it (the `preparing`/`running` transitions keep it).
        self.rec.started_at = Some(Timestamp::now());
        // The containment's line and the first command's start are one
        // append (written when that command is started, `launch`).
        self.events.hold();
        self.contain();
        let ending = self.stages(plan, &sink, &mut abort_watch).await;
        abort_watch.stop();
        self.release_containment();
        let ending = match ending {
            Ok(ending) | Err(Stop::End(ending)) => ending,
            Err(Stop::Fatal(e)) => return Err(e),
        };
        let ending = self.with_lost_output(ending, &sink);
        self.end_with(ending)
    }

    /// The main command's timeout: the prompt's front matter's, else the
    /// profile's.
    fn timeout(&self) -> Duration {
        self.config.timeout_for(&self.rec, &self.profile)
    }

    /// The job's start, durable before anything of it runs: the
    /// `monitor_started` journal line with the record (this monitor's pid
    /// and start time), `fdatasync`ed, then the run folder fsynced (the
    /// journal's, the prompt's and the body's names in it). The claim's
    /// own folders (the inbox's, `runs/`) were synced by the daemon's group
    /// commit before it started this monitor. Its view, `job.json`, is
    /// owed ([`INDEX_AFTER`]).
    ///
    /// A job starts only where its records can be written: room for the
    /// journal's lines is reserved first ([`JOURNAL_ROOM`]), so that a
    /// full or read-only disk fails here and the job stays queued, not
    /// half-way through its start (an append may fit a full disk's last
    /// block). A filesystem that reserves nothing has the view written
    /// now instead, as the test of room.
    fn save_with_claim(&mut self) -> Result<(), JobError> {
        let reserved = self.events.reserve(JOURNAL_ROOM)?;
        let fields = json!({"monitor_pid": self.rec.monitor_pid});
        let (layout, events) = (&self.layout, &mut self.events);
        let durable = jobwarden_model::job::Durable(true);
        self.view_owed =
            self.rec
                .journal_view_owed(layout, events, Op::MonitorStarted, fields, durable)?;
        if self.view_owed && !reserved {
            self.rec.save_unsynced(&self.layout)?;
            self.view_owed = false;
        }
        let run_dir = self.layout.run_dir(&self.rec.job_id);
        match self.locks.first() {
            Some(held) => fsio::sync_held_dir(held, &run_dir)?,
            None => fsio::sync_parent(self.layout.root(), &self.layout.events(&self.rec.job_id))?,
        }
        Ok(())
    }

    /// The job's own working folder, `work/` in its run folder: made in the
    /// run folder this monitor holds locked (one `mkdirat`).
    fn create_workdir(&self) -> Result<(), jobwarden_sys::error::IoError> {
        let (root, id) = (self.layout.root(), &self.rec.job_id);
        let workdir = self.layout.job_workdir(id);
        match (self.locks.first(), workdir.file_name()) {
            (Some(held), Some(name)) => fsio::create_dir_in(root, held, name, &workdir),
            _ => fsio::create_dirs(root, &workdir),
        }
    }

    /// Put the record's new state in the job index (fail-soft: a stale
    /// row is refreshed at the next daemon start, and job.json wins).
    fn index(&self) {
        let Some(mut ledger) = self.open_ledger() else {
            return;
        };
        if let Err(e) = ledger.index_job(&self.rec) {
            tracing::warn!(job = %self.rec.job_id, "{e}; the job index is refreshed at the next start");
        }
    }

    /// Write `job.json` if it is behind the journal (fail-soft: readers
    /// take the journal's line, and the next heartbeat or change writes
    /// the view again).
    fn write_owed_view(&mut self) {
        if !std::mem::take(&mut self.view_owed) {
            return;
        }
        if let Err(e) = self.rec.save_unsynced(&self.layout) {
            tracing::warn!(job = %self.rec.job_id, "{e}; job.json is behind its journal until written again");
        }
    }

    /// Tell the job index that the job runs: through the daemon, whose
    /// ledger is open, when it reads this monitor's reports; else here.
    fn index_running(&self) {
        jobwarden_sys::fault::pause("monitor-index");
        let line = handover::running_line(self.rec.job_id.as_str());
        if self.hand_over && handover::report(&mut std::io::stdout().lock(), &line) {
            return;
        }
        self.index();
        // The ledger's connection (its schema, its page cache) is gone:
        // give its pages back, for as long as the job runs, beside every
        // other running job's monitor.
        memory::release_free_memory();
    }

    /// The ledger, opened for one write (so a replaced file is never
    /// written through a stale handle). Fail-soft: the row is backfilled
    /// from `job.json`. Damage is the daemon's to report, once, so a
    /// monitor only mentions it at debug level.
    fn open_ledger(&self) -> Option<Ledger> {
        match Ledger::open(&self.layout.ledger()) {
            Ok(ledger) => Some(ledger),
            Err(e) if e.is_damaged() => {
                tracing::debug!(job = %self.rec.job_id, "{e}");
                None
            }
            Err(e) => {
                tracing::warn!(job = %self.rec.job_id, "{e}; the row will be backfilled from job.json");
                None
            }
        }
    }

    /// End the job as `stop` says, or give up on a record that cannot be
    /// written.
    fn stopped(&mut self, stop: Stop) -> Result<Outcome, JobError> {
        match stop {
            Stop::End(ending) => self.end_with(ending),
            Stop::Fatal(e) => Err(e),
        }
    }

    /// Say in `ending` that output was lost to failing writes of `job.log`,
    /// if it was.
    fn with_lost_output(&mut self, mut ending: Ending, sink: &SharedSink) -> Ending {
        let Some(lost) = output::lock(sink).lost.clone() else {
            return ending;
        };
        self.events.append(
            Op::OutputLost,
            json!({"bytes": lost.bytes, "error": lost.error}),
        );
        let note = format!(
            "{} bytes of its output could not be written to job.log ({})",
            lost.bytes, lost.error
        );
        ending.reason = Some(
            ending
                .reason
                .map_or(note.clone(), |r| format!("{r}; {note}")),
        );
        ending
    }

    /// How much of each stream of `stage`'s command is kept for the ledger:
    /// the last `artifact_tail_bytes`, or for the main command up to the
    /// profile's `keep_output` (an output no longer is kept whole).
    fn tail_cap(&self, stage: Stage) -> usize {
        let tail = self.config.artifact_tail_bytes;
        let cap = match (stage, self.profile.keep_output) {
            (Stage::Run, Some(keep)) => keep.max(tail),
            _ => tail,
        };
        usize::try_from(cap).unwrap_or(usize::MAX)
    }

    /// How the job ends in `state`: with the output tails of what ran and
    /// the paths it ran on, if anything ran.
    fn ending(&self, state: JobState, reason: Option<String>) -> Ending {
        let mut ending = Ending::new(state, reason);
        ending.may_requeue = !self.keep_archived;
        if !self.artifacts.is_empty() {
            ending.artifacts = self.artifacts.clone();
            ending.paths = self.paths();
        }
        ending
    }

    /// How the job ends after its main command: a failure matching the
    /// profile's rate-limit rules (they judge the main command's exit code
    /// and output only) is `rate_limited`.
    fn ending_after_run(&self, state: JobState, reason: Option<String>) -> Ending {
        let mut ending = self.ending(state, reason);
        let text = |kind: &str| {
            self.artifacts
                .iter()
                .find(|a| a.kind == kind)
                .map_or("", |a| a.text.as_str())
        };
        // Judged only for a failure: the patterns are compiled when first
        // needed.
        let limited = || {
            // Its exit codes judge a command that exited, not one a signal
            // ended (whose code is 128 + the signal's number).
            let exited = self.rec.exit_code.filter(|_| self.rec.signal.is_none());
            self.profile
                .rate_limit
                .matches(exited, &[text("stdout_tail"), text("stderr_tail")])
        };
        if state == JobState::Failed && limited() {
            ending.outcome = jobwarden_ledger::Outcome::RateLimited;
        }
        ending
    }

    /// Keep the tails of the command of `stage` that just ended, for the
    /// ledger: the main command's as `stdout_tail` and `stderr_tail`, a
    /// phase's under its name (`prepare_stdout_tail`, ...). Returns its
    /// stdout tail as text, at most `keep` bytes.
    fn keep_tails(&mut self, stage: Stage, sink: &SharedSink, keep: usize) -> String {
        let cap = self.tail_cap(stage);
        let (out, err) = output::lock(sink).take_tails();
        let (out_kind, err_kind) = match stage {
            Stage::Prepare => ("prepare_stdout_tail", "prepare_stderr_tail"),
            Stage::Run => ("stdout_tail", "stderr_tail"),
            Stage::Publish => ("publish_stdout_tail", "publish_stderr_tail"),
        };
        let artifact = |kind, tail: &output::Tail| Artifact {
            kind,
            text: tail.text(cap),
            truncated: tail.total() > cap as u64,
            bytes: tail.total(),
        };
        self.artifacts.push(artifact(out_kind, &out));
        self.artifacts.push(artifact(err_kind, &err));
        out.text(keep)
    }

    /// `executed_on`: the prompt and the workdir; `affected`: the files the
    /// main command changed in its git checkout (`changed.rs`), and what
    /// the job listed in `$JOBWARDEN_RUN_DIR/affected`, relative paths
    /// resolved against the workdir.
    fn paths(&self) -> Vec<(PathRelation, String)> {
        let prompt = self.layout.waiting_prompt(&self.rec.prompt_name());
        let mut paths = vec![(PathRelation::ExecutedOn, prompt.display().to_string())];
        let Some(workdir) = self.rec.workdir.clone() else {
            return paths;
        };
        paths.push((PathRelation::ExecutedOn, workdir.clone()));
        let list = self.layout.affected_list(&self.rec.job_id);
        // Through the sandbox's handle only if no command could have
        // replaced the file.
        let read = match self.affected.as_ref().filter(|_| !self.root_exposed) {
            Some(file) => file
                .metadata()
                .map_err(|e| jobwarden_sys::error::IoError::new("reading", &list, e))
                .and_then(|m| fsio::read_capped_at(file, &list, m.len(), AFFECTED_MAX_BYTES)),
            None => fsio::read_capped(self.layout.root(), &list, AFFECTED_MAX_BYTES),
        };
        for path in &self.changed {
            paths.push((PathRelation::Affected, path.clone()));
        }
        let Ok((bytes, _)) = read else {
            return paths;
        };
        for line in String::from_utf8_lossy(&bytes)
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
        {
            paths.push((
                PathRelation::Affected,
                jobwarden_ledger::stored_path(Some(&workdir), line),
            ));
        }
        paths
    }

    /// Record the abort request and say why the job ends.
    fn abort_ending(&mut self) -> EarlyEnd {
        EarlyEnd::Abort(self.abort_reason())
    }

    /// Record the abort request (and the state it came in); its reason.
    fn abort_reason(&mut self) -> String {
        self.rec.abort_requested_at = Some(Timestamp::now());
        self.events
            .append(Op::AbortRequested, json!({"while": self.rec.state}));
        let ended = self.rec.state.stopped_by_request();
        abort::reason(&self.layout, &self.rec.job_id, ended)
    }

    fn heartbeat(&mut self, sink: &SharedSink) {
        jobwarden_sys::fault::point("monitor-heartbeat");
        self.renew_lease();
        if let Err(e) = jobwarden_engine::shared_inbox::restore(&self.layout, &self.rec, false) {
            tracing::warn!(job = %self.rec.job_id, "writing its claim record again: {e}");
        }
        self.restore_records();
        self.sync_log_fields(sink);
        self.rec.heartbeat_at = Some(Timestamp::now());
        // Fail-soft: a missed heartbeat shows as a stale one; the job goes
        // on. Reported when saves start failing and when they recover. Not
        // fsynced: after a power cut, no heartbeat matters.
        match self.rec.save_unsynced(&self.layout) {
            Ok(()) if std::mem::take(&mut self.heartbeat_failing) => {
                tracing::info!(job = %self.rec.job_id, "heartbeats are written again");
            }
            Ok(()) => {}
            Err(e) if !self.heartbeat_failing => {
                tracing::warn!(job = %self.rec.job_id, "heartbeat: {e}; the job goes on");
                self.heartbeat_failing = true;
            }
            Err(_) => {}
        }
    }

    /// Renew the host's lease in a shared inbox: while this job runs, no
    /// other host takes its claim, even with the daemon gone.
    fn renew_lease(&mut self) {
        match jobwarden_engine::shared_inbox::renew(&self.layout, self.config) {
            Ok(()) if std::mem::take(&mut self.lease_failing) => {
                tracing::info!(job = %self.rec.job_id, "the host's lease is renewed again");
            }
            Ok(()) => {}
            Err(e) if !self.lease_failing => {
                tracing::warn!(job = %self.rec.job_id, "renewing the host's lease in the shared inbox: {e}; another host may take this job's claim");
                self.lease_failing = true;
            }
            Err(_) => {}
        }
    }

    fn sync_log_fields(&mut self, sink: &SharedSink) {
        let s = output::lock(sink);
        self.rec.log_bytes = s.bytes;
        self.rec.last_output_at = s.last_output_at;
        if s.truncated && !self.rec.log_truncated {
            self.rec.log_truncated = true;
            self.events.append(
                Op::OutputCapped,
                json!({"max_log_bytes": self.config.max_log_bytes}),
            );
        }
    }

    fn end(&mut self, state: JobState, reason: Option<String>) -> Result<Outcome, JobError> {
        self.end_with(Ending::new(state, reason))
    }

    /// Record the end, in the ledger too. A ledger that cannot be opened is
    /// reported and the job still ends (its row is backfilled later).
    ///
    /// When the disk is full or read-only, the end cannot be written: the
    /// monitor keeps its job (and its lock) and tries again every heartbeat
    /// until it can, so the job ends correctly once space returns instead of
    /// being left `running` on disk.
    fn end_with(&mut self, ending: Ending) -> Result<Outcome, JobError> {
        let state = ending.state;
        let mut reported = false;
        loop {
            let before = self.rec.clone();
            match self.try_end(ending.clone()) {
                Err(e) if e.storage_fault().is_some() => {
                    if !reported {
                        tracing::error!(job = %self.rec.job_id, "cannot record the job's end: {e}; retrying every heartbeat until there is space");
                        reported = true;
                    }
                    self.rec = before;
                    // Blocking is fine: the job is reaped and its output drained,
                    // nothing else in this process needs the runtime any more.
                    std::thread::sleep(self.config.heartbeat_interval);
                }
                other => other?,
            }
            if self.rec.state.is_terminal() {
                tracing::info!(job = %self.rec.job_id, %state, "job ended");
                return Ok(Outcome::Finished(state, self.handed.take()));
            }
        }
    }

    fn try_end(&mut self, ending: Ending) -> Result<(), JobError> {
        self.restore_records();
        if self.hand_over
            && !(ending.may_requeue && jobwarden_engine::retry::may_retry(ending.outcome))
        {
            let mut finisher = Finisher {
                layout: &self.layout,
                config: self.config,
                ledger: None,
            };
            self.handed = Some(finisher.record_end(&mut self.rec, &mut self.events, ending)?);
            return Ok(());
        }
        let mut ledger = self.open_ledger();
        let mut finisher = Finisher {
            layout: &self.layout,
            config: self.config,
            ledger: ledger.as_mut(),
        };
        finisher.finish(&mut self.rec, &mut self.events, ending)
    }
}
