//! `jobwarden wait [JOB…] [--project P…] [--all] [--timeout DUR] [--json]`:
//! block until the named jobs have ended (and, with `--project`, every job
//! and waiting prompt of those projects; with `--all`, until nothing is
//! waiting at all), saying how things stand on stderr ([`Progress`]), and
//! exit with the code of the worst outcome ([`Exit`]).
//!
//! It sleeps on inotify ([`Watch`]): each followed job's run folder (its
//! `job.json` is replaced at every change), `runs/` (new jobs) and the
//! inbox folders in scope, with a re-check every 5 s for what inotify
//! cannot report, or a poll every second where no watch can be had. What is followed, and
//! which prompts count, is [`scope`]'s; the jobs' records, [`tracker`]'s.
//!
//! [`Progress`]: super::progress::Progress
//! [`Exit`]: super::exit::Exit
//! [`Watch`]: super::watch::Watch

pub mod scope;
pub mod tracker;

use std::collections::HashSet;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant, UNIX_EPOCH};

use anyhow::anyhow;
use serde::Serialize;

use super::No;
use super::exit::Exit;
use super::output::{fmt_duration, print_json};
use super::progress::{Progress, counts_text};
use super::watch::{Watch, Woken};
use crate::cli::{GlobalArgs, WaitArgs};
use jobwarden_ledger::Ledger;
use jobwarden_model::config::Config;
use jobwarden_model::job::{JobId, JobRecord, JobState};
use jobwarden_model::layout::{self, Layout};
use jobwarden_sys::clock::Timestamp;
use scope::{Prompts, Scope};
use tracker::Tracker;

/// How often everything is looked at again without an event (inotify
/// reports a lost event itself; this is for what it cannot see).
const RECHECK: Duration = Duration::from_secs(5);
/// How often everything is looked at where no watch can be had: bounded,
/// since a wait may follow thousands of jobs.
const POLL: Duration = Duration::from_secs(1);
/// How far back from the newest claim seen the index is asked again.
const CLAIM_MARGIN_MS: u64 = 1_000;
/// How often the live line is redrawn (the time waited moves on).
const TICK: Duration = Duration::from_secs(1);
/// The least time between two scans of the inbox (a burst of drops makes
/// one scan, not one per file).
const RESCAN_GAP: Duration = Duration::from_millis(200);

/// How often a job that has ended is read again until the daemon has
/// moved its prompt (no watch sees that move).
const SETTLE_POLL: Duration = Duration::from_millis(20);

pub fn run(global: &GlobalArgs, args: &WaitArgs) -> anyhow::Result<ExitCode> {
    let (config, layout) = super::load_existing(global)?;
    let scope = scope_of(args)?;
    let ledger = super::open_ledger(&layout)?;
    let named = resolve_named(&layout, ledger.as_ref(), &args.jobs)?;
    let mut waiter = Waiter::new(&layout, &config, ledger, scope);
    waiter.start(named);
    let deadline = args.timeout.map(|t| Instant::now() + t);
    let complete = waiter.run(deadline);
    waiter.report(complete, args.json)
}

/// `--project` (each checked to be a safe folder name) or `--all`.
fn scope_of(args: &WaitArgs) -> anyhow::Result<Scope> {
    if args.all {
        return Ok(Scope::All);
    }
    if args.project.is_empty() {
        return Ok(Scope::Jobs);
    }
    for project in &args.project {
        layout::validate_project(project).map_err(|e| {
            anyhow!("--project {project:?}: {e}; give a folder relative to the inbox, such as \"acme/api\"")
        })?;
    }
    Ok(Scope::Projects(args.project.clone()))
}

/// Every `<job>` argument, each with its run folder (else a clean "no").
fn resolve_named(
    layout: &Layout,
    ledger: Option<&Ledger>,
    args: &[String],
) -> anyhow::Result<Vec<JobId>> {
    let mut ids = Vec::new();
    for arg in args {
        let id = super::resolve_job(layout, ledger, arg)?;
        if !layout.run_dir(&id).is_dir() {
            return Err(No(format!(
                "job {id} has no run folder under {} (pruned by retention?); its end is in `jobwarden history show {id}`",
                layout.runs().display()
            ))
            .into());
        }
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    Ok(ids)
}

/// One wait: what it follows and how it sleeps.
struct Waiter<'a> {
    layout: &'a Layout,
    config: &'a Config,
    ledger: Option<Ledger>,
    scope: Scope,
    /// When the wait started (epoch ms): jobs in scope that ended before
    /// are not waited for.
    start_ms: u64,
    /// Jobs claimed since then (epoch ms) are asked of the index: moves on
    /// with the claims seen, so that a long wait asks for new ones only.
    claimed_since: u64,
    /// The jobs that had not ended at the start were asked for.
    started: bool,
    /// The job index could not be read (said once).
    index_failed: bool,
    tracker: Tracker<'a>,
    watch: Watch,
    progress: Progress,
    /// Run folders seen that are not followed (out of scope, unreadable).
    passed: HashSet<JobId>,
    /// Run folders seen without a record yet (a claim in progress): watched.
    unrecorded: HashSet<JobId>,
    prompts: Prompts,
    prompts_dirty: bool,
    last_scan: Option<Instant>,
}

impl<'a> Waiter<'a> {
    fn new(layout: &'a Layout, config: &'a Config, ledger: Option<Ledger>, scope: Scope) -> Self {
        let now_ms = Timestamp::now().epoch_ms();
        Waiter {
            layout,
            config,
            ledger,
            scope,
            start_ms: now_ms,
            claimed_since: now_ms,
            started: false,
            index_failed: false,
            tracker: Tracker::new(layout),
            watch: Watch::new(RECHECK, POLL),
            progress: Progress::new(),
            passed: HashSet::new(),
            unrecorded: HashSet::new(),
            prompts: Prompts::default(),
            prompts_dirty: true,
            last_scan: None,
        }
    }

    /// Watch first, then look: whatever changes after the look is an event.
    fn start(&mut self, named: Vec<JobId>) {
        if self.scope.discovers() {
            self.watch.add(&self.layout.runs(), false);
            for (dir, recursive) in self.scope.folders(self.layout) {
                self.watch.add(&dir, recursive);
            }
        }
        for id in named {
            self.follow(id);
        }
        self.look();
        self.warn_if_no_daemon();
    }

    /// Wait until everything is done (true) or `deadline` passes (false).
    fn run(&mut self, deadline: Option<Instant>) -> bool {
        loop {
            if self.prompts_dirty && self.scan_due() {
                self.look();
            }
            if self.done() {
                return true;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return false;
            }
            self.show_status();
            let tick = self.progress.is_live().then(|| Instant::now() + TICK);
            let settle = self
                .tracker
                .settling()
                .then(|| Instant::now() + SETTLE_POLL);
            let wake_by = [deadline, self.next_scan(), tick, settle]
                .into_iter()
                .flatten()
                .min();
            match self.watch.wait(wake_by) {
                Woken::Changed(paths) => paths.iter().for_each(|p| self.on_path(p)),
                Woken::Recheck => self.recheck(),
                // A live line's tick: the line is redrawn from what is read
                // now, so read the followed jobs again.
                Woken::Deadline if tick.is_some() || settle.is_some() => self.recheck(),
                Woken::Deadline => {}
            }
        }
    }

    fn done(&self) -> bool {
        self.tracker.all_done()
            && (!self.scope.discovers() || (!self.prompts_dirty && self.prompts.settled()))
    }

    /// Follow job `id` (named, or found in scope): watch its run folder
    /// and read its record.
    fn follow(&mut self, id: JobId) {
        if self.tracker.track(id.clone()) {
            self.watch.add(&self.layout.run_dir(&id), false);
            self.refresh(&id);
        }
    }

    /// Read a followed job's record again, and say what changed.
    fn refresh(&mut self, id: &JobId) {
        let update = self.tracker.refresh(id);
        let rec = self.tracker.get(id).and_then(|j| j.rec.as_ref());
        if let (Some(from), Some(rec)) = (update.changed_from, rec) {
            self.progress.job_changed(rec, from);
        }
        if let Some(why) = &update.lost {
            self.progress.say(format_args!(
                "jobwarden: job {id}: {why}; no longer waiting for it"
            ));
        }
        if update.ended || update.lost.is_some() {
            self.watch.remove(&self.layout.run_dir(id));
        }
    }

    /// An event at `path`: a run folder (new, or a followed job's record
    /// replaced) or an inbox folder in scope.
    fn on_path(&mut self, path: &Path) {
        let runs = self.layout.runs();
        if let Ok(rel) = path.strip_prefix(&runs) {
            let mut parts = rel.components();
            let Some(id) = parts
                .next()
                .and_then(|c| c.as_os_str().to_str())
                .and_then(|s| JobId::parse(s).ok())
            else {
                return;
            };
            // Inside a run folder only the record matters, not the log.
            let record = parts.next().is_none() || path == self.layout.job_json(&id);
            if record {
                self.on_job(id);
            }
        } else if path.starts_with(self.layout.inbox()) {
            self.prompts_dirty = true;
        }
    }

    fn on_job(&mut self, id: JobId) {
        if self.tracker.is_tracked(&id) {
            self.refresh(&id);
        } else if self.scope.discovers() && !self.passed.contains(&id) {
            self.consider(id);
        }
    }

    /// A run folder not followed yet: follow it if its job is in scope.
    fn consider(&mut self, id: JobId) {
        let dir = self.layout.run_dir(&id);
        match JobRecord::load_job(self.layout, &id) {
            Ok(rec) => {
                if self.unrecorded.remove(&id) {
                    self.watch.remove(&dir);
                }
                if self.scope.wants(&rec, self.start_ms) {
                    self.follow(id);
                } else {
                    self.passed.insert(id);
                }
            }
            Err(jobwarden_model::job::RecordError::Io(e))
                if e.kind() == std::io::ErrorKind::NotFound && dir.is_dir() =>
            {
                if self.unrecorded.insert(id) {
                    self.watch.add(&dir, false);
                }
            }
            Err(e) => {
                tracing::debug!("run folder {} not followed: {e}", dir.display());
                if self.unrecorded.remove(&id) {
                    self.watch.remove(&dir);
                }
                self.passed.insert(id);
            }
        }
    }

    /// Look at everything again: an event may have been missed.
    fn recheck(&mut self) {
        let pending: Vec<JobId> = self.tracker.pending().cloned().collect();
        for id in pending {
            self.refresh(&id);
        }
        for id in self.unrecorded.clone() {
            self.consider(id);
        }
        self.prompts_dirty = self.scope.discovers();
    }

    /// Scan the inbox in scope, then ask the index for jobs in scope, in
    /// that order: a prompt the scan no longer sees was claimed before it,
    /// so its job is in the index by then, even one that already ended.
    /// A job index that cannot be read (damaged, busy) is said once, not
    /// fatal: `runs/` is watched all the same.
    fn look(&mut self) {
        if self.scope.discovers() {
            self.scan_prompts();
            if let Err(e) = self.discover() {
                if !std::mem::replace(&mut self.index_failed, true) {
                    self.progress.say(format_args!(
                        "jobwarden: {e:#}; new jobs are found by watching {} only",
                        self.layout.runs().display()
                    ));
                }
            }
        }
        self.prompts_dirty = false;
    }

    /// Jobs in scope the index knows of that are not followed yet.
    fn discover(&mut self) -> anyhow::Result<()> {
        if !self.scope.discovers() {
            return Ok(());
        }
        if self.ledger.is_none() {
            // The daemon creates it when it first starts.
            self.ledger = super::open_ledger(self.layout)?;
        }
        let (ids, newest) = self.scope.indexed_jobs(
            self.layout,
            self.ledger.as_ref(),
            self.claimed_since,
            !self.started,
        )?;
        if !self.started {
            self.follow_earlier();
        }
        self.started = true;
        if let Some(newest) = newest {
            // A margin for claims indexed out of order (a clock step).
            self.claimed_since = self
                .claimed_since
                .max(newest.saturating_sub(CLAIM_MARGIN_MS));
        }
        for id in ids {
            if !self.tracker.is_tracked(&id) && !self.passed.contains(&id) {
                self.consider(id);
            }
        }
        Ok(())
    }

    /// Follow each prompt's newest job in the current batch of the
    /// projects in scope ([`Scope::earlier_jobs`]), so that one that ended
    /// before the wait counts; one whose run folder retention removed is
    /// left out.
    fn follow_earlier(&mut self) {
        let Some(ledger) = self.ledger.as_ref() else {
            return;
        };
        let earlier = match self.scope.earlier_jobs(ledger, self.start_ms) {
            Ok(ids) => ids,
            Err(e) => {
                self.progress.say(format_args!(
                    "jobwarden: {e:#}; jobs that ended before the wait are not counted"
                ));
                return;
            }
        };
        for id in earlier {
            if self.tracker.is_tracked(&id) || !self.layout.run_dir(&id).is_dir() {
                continue;
            }
            self.tracker.track_earlier(id.clone());
            // Its prompt may not have moved yet: watched until it settles.
            self.watch.add(&self.layout.run_dir(&id), false);
            self.refresh(&id);
        }
    }

    fn scan_due(&self) -> bool {
        self.last_scan.is_none_or(|t| t.elapsed() >= RESCAN_GAP)
    }

    /// When a scan put off by [`RESCAN_GAP`] is due.
    fn next_scan(&self) -> Option<Instant> {
        self.prompts_dirty
            .then(|| self.last_scan.map(|t| t + RESCAN_GAP))
            .flatten()
    }

    /// Scan the inbox folders in scope; say which prompts a cooldown defers.
    fn scan_prompts(&mut self) {
        self.prompts_dirty = false;
        self.last_scan = Some(Instant::now());
        let now = Timestamp::now().epoch_ms();
        let found = self
            .scope
            .prompts(self.layout, self.config, self.ledger.as_ref(), now);
        for (prompt, until) in &found.deferred {
            if !self.prompts.deferred.contains_key(prompt) {
                self.progress.say(format_args!(
                    "prompt {prompt}: in cooldown until {}; not waited for",
                    at(*until)
                ));
            }
        }
        self.prompts = found;
    }

    fn show_status(&mut self) {
        let mut counts = self.tracker.counts();
        counts.push((self.prompts.waiting.len(), "in the inbox"));
        counts.push((self.prompts.deferred.len(), "deferred"));
        let text = counts_text(counts.iter().map(|(n, what)| (*n, *what)));
        self.progress.status(&text);
    }

    /// Say a queued job or a waiting prompt needs a daemon that is not there.
    fn warn_if_no_daemon(&mut self) {
        let queued =
            self.tracker.jobs().iter().any(|j| {
                j.pending() && j.rec.as_ref().is_some_and(|r| r.state == JobState::Queued)
            });
        if !queued && self.prompts.settled() {
            return;
        }
        if let Ok(None) = jobwarden_sys::procfs::flock_holder(&self.layout.daemon_lock()) {
            self.progress.say(format_args!(
                "jobwarden: no daemon is running on {}: queued jobs and waiting prompts start when one does (jobwarden daemon)",
                self.layout.root().display()
            ));
        }
    }

    /// The last words: a summary on stderr, the JSON object on stdout with
    /// `--json`, and the exit code.
    fn report(mut self, complete: bool, json: bool) -> anyhow::Result<ExitCode> {
        self.progress.clear();
        let mut exit = self.tracker.exit();
        if !complete {
            exit = exit.worst(Exit::Unfinished);
        }
        self.summarise(complete);
        if json {
            print_json(&self.json(complete, exit))?;
        }
        Ok(exit.into())
    }

    fn summarise(&mut self, complete: bool) {
        let ended: Vec<(usize, &str)> = self
            .tracker
            .counts()
            .into_iter()
            .filter(|(_, s)| s.parse::<JobState>().is_ok_and(JobState::is_terminal))
            .collect();
        let total: usize = ended.iter().map(|(n, _)| n).sum();
        let mut text = match total {
            0 => "wait: no job ended".to_owned(),
            _ => format!("wait: {total} ended: {}", counts_text(ended)),
        };
        if !complete {
            let mut left = self.tracker.counts();
            left.retain(|(_, s)| s.parse::<JobState>().is_ok_and(|s| !s.is_terminal()));
            left.push((self.prompts.waiting.len(), "in the inbox"));
            let elapsed = self.start_ms.abs_diff(Timestamp::now().epoch_ms());
            text.push_str(&format!(
                "; gave up after {}: {} still waiting",
                fmt_duration(elapsed),
                counts_text(left)
            ));
        }
        self.progress.say(text);
        for (prompt, until) in &self.prompts.deferred {
            self.progress.say(format_args!(
                "wait: not waited for: {prompt} (in cooldown until {})",
                at(*until)
            ));
        }
    }

    fn json(&self, complete: bool, exit: Exit) -> WaitJson {
        WaitJson {
            exit_code: exit.code(),
            result: exit.name(),
            complete,
            jobs: self.tracker.jobs().iter().map(WaitedJob::of).collect(),
            waiting: self.prompts.waiting.iter().map(|p| p.to_string()).collect(),
            deferred: self
                .prompts
                .deferred
                .iter()
                .map(|(prompt, until)| DeferredJson {
                    prompt: prompt.clone(),
                    until: at(*until),
                })
                .collect(),
        }
    }
}

/// An epoch-ms time as a timestamp.
fn at(ms: u64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_millis(ms))
}

/// What `--json` prints (docs/cli-json.md).
#[derive(Debug, Serialize)]
struct WaitJson {
    exit_code: u8,
    result: &'static str,
    /// False when `--timeout` ran out first.
    complete: bool,
    jobs: Vec<WaitedJob>,
    /// Prompts still waiting to be claimed (when `--timeout` ran out).
    waiting: Vec<String>,
    /// Prompts in cooldown: not waited for.
    deferred: Vec<DeferredJson>,
}

#[derive(Debug, Serialize)]
struct WaitedJob {
    id: JobId,
    project: Option<String>,
    name: Option<String>,
    /// `null` when its record could never be read.
    state: Option<JobState>,
    attempt: Option<u32>,
    exit_code: Option<i32>,
    state_reason: Option<String>,
    finished_at: Option<Timestamp>,
    /// Whether its end counts in the exit code (false: a later attempt of
    /// its prompt, also listed, replaced it; or it has not ended).
    counted: bool,
    /// Why its record could no longer be read.
    error: Option<String>,
    /// It had ended before the wait started (`--project`: the project's
    /// current batch).
    before_wait: bool,
}

impl WaitedJob {
    fn of(job: &tracker::Tracked) -> Self {
        let rec = job.rec.as_ref();
        WaitedJob {
            id: job.id.clone(),
            project: rec.map(|r| r.project.clone()),
            name: rec.map(|r| r.name.clone()),
            state: rec.map(|r| r.state),
            attempt: rec.map(|r| r.attempt),
            exit_code: rec.and_then(|r| r.exit_code),
            state_reason: rec.and_then(|r| r.state_reason.clone()),
            finished_at: rec.and_then(|r| r.finished_at),
            counted: job.exit().is_some(),
            error: job.lost.clone(),
            before_wait: job.earlier,
        }
    }
}

#[derive(Debug, Serialize)]
struct DeferredJson {
    prompt: String,
    until: Timestamp,
}
