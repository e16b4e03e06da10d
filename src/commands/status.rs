//! `jobwarden status [--json]`: is the daemon alive (its lock, read from
//! `/proc/locks` without touching it, and `daemon.json`'s heartbeat), does
//! the root accept writes (probed here, and as the daemon last saw it), and
//! how the jobs stand: the overall state, counts by state, running jobs
//! with their heartbeats, the queue, deferred prompts, the last finished
//! jobs and the prompts needing attention. Everything about jobs comes from
//! the job index and the ledger's indexes (plus the `job.json` of each live
//! job), never from reading every run folder.
//!
//! "Not running" is an answer, not an error, and the exit status gives it
//! as `systemctl is-active` does: 0 when a daemon runs on the root, 3 when
//! none does (`exit.rs`), in both cases after printing the whole answer
//! (`--json` too); 2 only when the question could not be answered.

use std::process::ExitCode;
use std::time::Duration;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::cli::{GlobalArgs, StatusArgs};
use jobwarden_daemon::state_file::{self, DaemonSeen, Phase};
use jobwarden_ledger::{Attention, IndexedJob, Ledger, LedgerError, health, short_id};
use jobwarden_model::config::Config;
use jobwarden_model::job::{JobId, JobRecord, JobState};
use jobwarden_model::layout::Layout;
use jobwarden_sys::clock::Timestamp;
use jobwarden_sys::storage::{self, Condition};

use super::exit::Exit;
use super::jobs::JobJson;
use super::output::{
    alarm, fit, fit_pad, fmt_ago, fmt_ago_exact, fmt_bytes, fmt_duration, fmt_in, print_json,
    prompt_label, timestamp, wrap,
};
use super::queue_view::{QueueView, pause_lines};
use super::reload::ConfigView;

mod human;
use human::print_human;

/// A heartbeat older than this many intervals is stale.
const STALE_HEARTBEATS: u32 = 3;

/// How many finished jobs and prompts needing attention are listed.
const RECENT: usize = 5;
/// A step of the wall clock is shown this long after it was noticed.
const CLOCK_STEP_SHOWN_MS: u64 = 24 * 3600 * 1000;

fn now_ms() -> u64 {
    Timestamp::now().epoch_ms()
}

/// How many running and queued jobs are listed (the counts are complete).
const LISTED: usize = 20;

pub fn run(global: &GlobalArgs, args: &StatusArgs) -> anyhow::Result<ExitCode> {
    if args.watch {
        return super::redraw::every_second("jobwarden status", || once(global, args));
    }
    once(global, args)
}

/// The status, once.
fn once(global: &GlobalArgs, args: &StatusArgs) -> anyhow::Result<ExitCode> {
    // An invalid config on disk is part of the answer (`config.errors`).
    let loaded = super::load_lenient(global)?;
    let (config, layout) = (loaded.config, loaded.layout);
    super::root_must_exist(&layout)?;
    // A damaged ledger is an answer too: `ledger` says what is wrong.
    let (ledger, damage) = match super::open_ledger(&layout) {
        Ok(ledger) => (ledger, None),
        Err(e) if e.is_damaged() => (None, Some(e)),
        Err(e) => return Err(e.into()),
    };
    let (mut status, found) = Status::gather(&config, &layout, ledger.as_ref())?;
    status.set_ledger(damage.as_ref().or(found.as_ref()));
    status.config = ConfigView::gather(
        status.live.as_ref(),
        loaded.path.as_deref(),
        loaded.problems,
    );
    if args.json {
        print_json(&status)?;
    } else {
        print_human(&status)?;
    }
    Ok(if status.daemon.alive {
        Exit::Success
    } else {
        Exit::NotRunning
    }
    .into())
}

#[derive(Debug, Serialize)]
pub struct Status {
    root: String,
    version: &'static str,
    daemon: DaemonView,
    storage: StorageView,
    /// Whether `ledger.db` is usable: damage this command found opening it,
    /// or that the live daemon reported (its start's full check).
    ledger: health::Condition,
    /// `never_run`, `active` (something runs or is queued), `waiting`
    /// (nothing does, but prompts wait in the inbox), `needs_attention`
    /// (nothing does or waits, but some prompt's last run failed, timed
    /// out, was rate limited or could not start, and nobody acknowledged
    /// it) or `all_done`.
    overall_state: &'static str,
    /// Prompts waiting in the inbox with no job yet (deferred ones too):
    /// work not done.
    waiting: usize,
    /// Jobs with a run folder, by state (every state, zeros included).
    counts: BTreeMap<&'static str, u64>,
    running: Vec<RunningView>,
    queued: Vec<QueuedView>,
    /// The pauses in force (markers under `control/`).
    paused: jobwarden_model::control::Pauses,
    /// The limits set by hand (`jobwarden limit`, markers under `control/`).
    #[serde(skip_serializing_if = "jobwarden_model::limits::Limits::is_empty")]
    limits: jobwarden_model::limits::Limits,
    deferred: Vec<state_file::Deferred>,
    /// The last finished jobs, newest first.
    recent: Vec<JobJson>,
    #[serde(skip)]
    recent_rows: Vec<IndexedJob>,
    /// What the live daemon said of the ledger (taken by `set_ledger`).
    #[serde(skip)]
    live_ledger: Option<health::Condition>,
    /// The live daemon's `daemon.json`.
    #[serde(skip)]
    live: Option<DaemonSeen>,
    /// The config in force, its reloads, and the one on disk.
    config: ConfigView,
    needs_attention: Vec<AttentionView>,
    /// Prompts whose last run went wrong that `jobwarden ack` cleared.
    acknowledged: u64,
    /// Once nothing runs or waits: the last batch of work, summed up.
    completion_summary: Option<jobwarden_ledger::CompletionSummary>,
    /// The latest step of the wall clock a daemon noticed, if any.
    last_clock_step: Option<ClockStep>,
}

/// A step of the wall clock (`clock_steps` in the ledger).
#[derive(Debug, Serialize)]
struct ClockStep {
    noticed_at: Timestamp,
    /// + ahead, - back.
    step_ms: i64,
    host: String,
}

/// A job holding a slot.
#[derive(Debug, Serialize)]
struct RunningView {
    id: String,
    project: String,
    name: String,
    state: String,
    attempt: u32,
    started_at: Option<Timestamp>,
    elapsed_ms: Option<u64>,
    heartbeat_at: Option<Timestamp>,
    heartbeat_age_ms: Option<u64>,
    /// Older than three heartbeat intervals: its monitor may be wedged.
    heartbeat_stale: bool,
    pid: Option<i32>,
    monitor_pid: Option<i32>,
}

/// A claimed job waiting for a slot.
#[derive(Debug, Serialize)]
struct QueuedView {
    id: String,
    project: String,
    name: String,
    created_at: Timestamp,
    /// Why it has not started, when known.
    waits: Option<String>,
}

/// A prompt whose last run went wrong.
#[derive(Debug, Serialize)]
struct AttentionView {
    project: String,
    name: String,
    outcome: String,
    job_id: String,
    finished_at: Timestamp,
    /// Why it ended so; for `setup_failed`, what to fix.
    reason: Option<String>,
}

impl From<Attention> for AttentionView {
    fn from(a: Attention) -> Self {
        AttentionView {
            finished_at: timestamp(a.finished_at),
            project: a.project,
            name: a.name,
            outcome: a.outcome,
            job_id: a.job_id,
            reason: a.reason,
        }
    }
}

#[derive(Debug, Serialize)]
struct DaemonView {
    alive: bool,
    /// The pid holding the lock, or the last one recorded.
    pid: Option<u32>,
    phase: Option<Phase>,
    started_at: Option<Timestamp>,
    heartbeat_at: Option<Timestamp>,
    /// Alive, but its heartbeat is older than three intervals (a wedged
    /// loop, or `daemon.json` cannot be written).
    heartbeat_stale: bool,
    version: Option<String>,
    host: Option<String>,
    watch: Option<String>,
    /// Why the watch is not `inotify` (null when it is).
    watch_reason: Option<String>,
    /// `namespaces`, or `unavailable` (jobs run without a sandbox).
    sandbox: Option<String>,
    /// Why the sandbox is unavailable.
    sandbox_reason: Option<String>,
    running: Option<usize>,
    queued: Option<usize>,
    /// Jobs whose end waits to be recorded (storage refused the write).
    unsettled: Option<usize>,
    /// The start-up check: `running` or `done`.
    startup_check: Option<String>,
    /// Why `daemon.json` could not be used, if it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    problem: Option<String>,
}

#[derive(Debug, Serialize)]
struct StorageView {
    /// The worse of this command's probe and what the live daemon reported.
    condition: Condition,
    free_bytes: Option<u64>,
    free_inodes: Option<u64>,
    /// Since when the daemon has seen the condition, if it reported it.
    since: Option<Timestamp>,
    detail: Option<String>,
}

impl Status {
    /// The status, and damage of the ledger its queries found (an index
    /// page the open did not read): then its jobs are left out, as for a
    /// ledger found damaged at its open.
    fn gather(
        config: &Config,
        layout: &Layout,
        ledger: Option<&Ledger>,
    ) -> anyhow::Result<(Status, Option<LedgerError>)> {
        let (seen, problem) = match state_file::read(layout) {
            Ok(seen) => (seen, None),
            Err(e) => (None, Some(e)),
        };
        let holder = jobwarden_sys::procfs::flock_holder(&layout.daemon_lock());
        let (holder, impostor) = jobwarden_daemon::lock::proven_holder(layout, holder);
        let problem = impostor.or(problem);
        let alive = match &holder {
            Ok(holder) => holder.is_some(),
            // No /proc/locks: trust a fresh heartbeat from a live pid.
            Err(_) => seen.as_ref().is_some_and(|s| {
                jobwarden_sys::procfs::is_running(s.pid as i32)
                    && !stale(s.heartbeat_at, config.heartbeat_interval)
            }),
        };
        let pid = holder
            .ok()
            .flatten()
            .map(|p| p as u32)
            .or(seen.as_ref().map(|s| s.pid));
        let daemon = DaemonView::new(alive, pid, seen.as_ref(), config, problem);
        let live = alive.then_some(seen.as_ref()).flatten();
        let storage = StorageView::new(layout, live);
        let waiting = QueueView::gather(layout, seen.as_ref(), alive);
        let mut status = Status {
            root: layout.root().display().to_string(),
            version: env!("CARGO_PKG_VERSION"),
            daemon,
            storage,
            ledger: health::Condition::ok(),
            overall_state: "never_run",
            counts: JobState::ALL.iter().map(|s| (s.as_str(), 0)).collect(),
            running: Vec::new(),
            queued: Vec::new(),
            paused: waiting.pauses.clone(),
            limits: jobwarden_model::limits::read(layout),
            deferred: live
                .map(|s| still_waiting(layout, &s.deferred))
                .unwrap_or_default(),
            recent: Vec::new(),
            recent_rows: Vec::new(),
            live_ledger: live.and_then(|s| s.ledger.clone()),
            live: live.cloned(),
            config: ConfigView::gather(None, None, Vec::new()),
            needs_attention: Vec::new(),
            completion_summary: None,
            last_clock_step: None,
            acknowledged: 0,
            waiting: jobwarden_engine::waiting::list(layout).len(),
        };
        let Some(ledger) = ledger else {
            return Ok((status, None));
        };
        let Err(e) = status.add_jobs(config, layout, ledger, live, &waiting) else {
            return Ok((status, None));
        };
        match e.downcast::<LedgerError>() {
            Ok(damage) if damage.is_damaged() => {
                status.forget_jobs();
                Ok((status, Some(damage)))
            }
            Ok(other) => Err(other.into()),
            Err(e) => Err(e),
        }
    }

    /// What the job index said, left out: it cannot be trusted.
    fn forget_jobs(&mut self) {
        for n in self.counts.values_mut() {
            *n = 0;
        }
        self.running.clear();
        self.queued.clear();
        self.recent.clear();
        self.recent_rows.clear();
        self.needs_attention.clear();
        self.completion_summary = None;
        self.acknowledged = 0;
        self.overall_state = "never_run";
    }

    /// The ledger's condition: damage found here wins, then the live
    /// daemon's report. Without the job index a damaged ledger would read
    /// as `never_run`: the state is `active` while the daemon holds jobs,
    /// else `needs_attention`.
    fn set_ledger(&mut self, damage: Option<&LedgerError>) {
        let reported = self
            .live_ledger
            .take()
            .filter(|c| !c.ok && self.daemon.alive);
        self.ledger = match (damage, reported) {
            (Some(e), _) => health::Condition::of(e),
            (None, Some(c)) => c,
            (None, None) => return,
        };
        let held = self.daemon.running.unwrap_or(0) + self.daemon.queued.unwrap_or(0);
        if self.overall_state != "active" {
            self.overall_state = if held > 0 {
                "active"
            } else if self.waiting > 0 {
                "waiting"
            } else {
                "needs_attention"
            };
        }
    }

    fn add_jobs(
        &mut self,
        config: &Config,
        layout: &Layout,
        ledger: &Ledger,
        live: Option<&DaemonSeen>,
        waiting: &QueueView,
    ) -> anyhow::Result<()> {
        for (state, n) in ledger.count_jobs_by_state()? {
            if let Some(st) = state.parse::<JobState>().ok().map(JobState::as_str) {
                self.counts.insert(st, n);
            }
        }
        let now = Timestamp::now().epoch_ms();
        let slots = ledger.jobs_in_states(&["preparing", "running", "publishing"], LISTED)?;
        for j in slots {
            let Some(rec) = current_record(layout, &j.id) else {
                continue;
            };
            if rec.state.is_terminal() || rec.state == JobState::Queued {
                continue;
            }
            let age = rec.heartbeat_at.map(|t| now.saturating_sub(t.epoch_ms()));
            self.running.push(RunningView {
                elapsed_ms: rec.started_at.map(|t| now.saturating_sub(t.epoch_ms())),
                heartbeat_stale: age.is_none_or(|a| {
                    a > (config.heartbeat_interval * STALE_HEARTBEATS).as_millis() as u64
                }),
                heartbeat_age_ms: age,
                heartbeat_at: rec.heartbeat_at,
                started_at: rec.started_at,
                id: rec.job_id.to_string(),
                project: rec.project,
                name: rec.name,
                state: rec.state.to_string(),
                attempt: rec.attempt,
                pid: rec.pid,
                monitor_pid: rec.monitor_pid,
            });
        }
        // The daemon's own order when it runs; claim order otherwise (the
        // order the next daemon will start them in).
        let queued = match live.filter(|s| !s.queue.is_empty()) {
            Some(s) => s
                .queue
                .iter()
                .filter_map(|q| ledger.indexed_job(q.job_id()).ok().flatten())
                .collect(),
            None => ledger.jobs_in_states(&["queued"], LISTED)?,
        };
        self.queued = queued
            .into_iter()
            .map(|j| QueuedView {
                waits: waiting.reason(&j.id, &j.project),
                created_at: timestamp(j.created_at),
                id: j.id,
                project: j.project,
                name: j.name,
            })
            .collect();
        self.recent_rows = ledger.recently_finished(RECENT)?;
        self.recent = self.recent_rows.iter().map(JobJson::from).collect();
        self.needs_attention = ledger
            .prompts_needing_attention(RECENT)?
            .into_iter()
            .map(AttentionView::from)
            .collect();
        self.acknowledged = ledger.acknowledged_count()?;
        self.last_clock_step = ledger
            .last_clock_step()?
            .map(|(at, step_ms, host)| ClockStep {
                noticed_at: timestamp(at),
                step_ms,
                host,
            });
        let active: u64 = ["queued", "preparing", "running", "publishing"]
            .iter()
            .map(|s| self.counts.get(s).copied().unwrap_or(0))
            .sum();
        // A prompt waiting in the inbox is work not done: no summary yet.
        if active == 0 && self.waiting == 0 {
            self.completion_summary = ledger.completion_summary()?;
        }
        self.overall_state = if active > 0 {
            "active"
        } else if self.waiting > 0 {
            "waiting"
        } else if !self.needs_attention.is_empty() {
            "needs_attention"
        } else if ledger.ever_ran()? {
            "all_done"
        } else {
            "never_run"
        };
        Ok(())
    }
}

/// A live job's record as it is now (`None` if it cannot be read).
fn current_record(layout: &Layout, id: &str) -> Option<JobRecord> {
    JobId::parse(id)
        .ok()
        .and_then(|id| JobRecord::load_job(layout, &id).ok())
}

fn stale(heartbeat: Timestamp, interval: Duration) -> bool {
    heartbeat.age() > interval * STALE_HEARTBEATS
}

impl DaemonView {
    fn new(
        alive: bool,
        pid: Option<u32>,
        seen: Option<&DaemonSeen>,
        config: &Config,
        problem: Option<String>,
    ) -> Self {
        // Counts and phase only mean something while the daemon lives.
        let live = seen.filter(|_| alive);
        DaemonView {
            alive,
            pid,
            phase: seen.map(|s| if alive { s.phase } else { Phase::Stopped }),
            started_at: seen.map(|s| s.started_at),
            heartbeat_at: seen.map(|s| s.heartbeat_at),
            heartbeat_stale: alive
                && seen.is_none_or(|s| stale(s.heartbeat_at, config.heartbeat_interval)),
            version: seen.map(|s| s.version.clone()),
            host: seen.and_then(|s| s.host.clone()),
            watch: live.and_then(|s| s.watch.clone()),
            watch_reason: live.and_then(|s| s.watch_reason.clone()),
            sandbox: live.and_then(|s| s.sandbox.clone()),
            sandbox_reason: live.and_then(|s| s.sandbox_reason.clone()),
            running: live.map(|s| s.running),
            queued: live.map(|s| s.queued),
            unsettled: live.map(|s| s.unsettled),
            startup_check: live.and_then(|s| s.startup_check.clone()),
            problem,
        }
    }
}

impl StorageView {
    fn new(layout: &Layout, live: Option<&DaemonSeen>) -> Self {
        let probe = storage::probe(layout.root()).ok();
        let reported = live.and_then(|s| s.storage.clone()).filter(|h| !h.is_ok());
        let probed = probe.as_ref().map_or(Condition::Ok, |p| p.condition);
        let (condition, since, detail) = match reported {
            // The daemon saw a failing write the probe may not show (quota).
            Some(h) if probed == Condition::Ok => (h.condition, Some(h.since), h.detail),
            Some(h) if h.condition == probed => (probed, Some(h.since), h.detail),
            _ => (probed, None, None),
        };
        StorageView {
            condition,
            free_bytes: probe.as_ref().map(|p| p.free_bytes),
            free_inodes: probe
                .as_ref()
                .map(|p| p.free_inodes)
                .filter(|&n| n != u64::MAX),
            since,
            detail,
        }
    }
}

/// The daemon's deferred prompts that still wait in the inbox: one
/// cancelled (`jobwarden abort`) is gone before the daemon's timer says so.
fn still_waiting(layout: &Layout, deferred: &[state_file::Deferred]) -> Vec<state_file::Deferred> {
    deferred
        .iter()
        .filter(|d| {
            let (project, name) = d.prompt.rsplit_once('/').unwrap_or(("", &d.prompt));
            let prompt = jobwarden_model::layout::PromptName {
                project: project.to_owned(),
                name: name.to_owned(),
            };
            jobwarden_engine::waiting::look(layout, &prompt).is_some()
        })
        .cloned()
        .collect()
}
