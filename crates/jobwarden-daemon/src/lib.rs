//! jobwarden-daemon: the daemon. It locks the root, reconciles what is on
//! disk, then runs one loop that owns all scheduling state: it claims
//! prompts as the watcher reports them, starts a monitor per job (by exec)
//! when a slot is free, notices monitors ending, and heartbeats
//! `daemon.json`. `run` takes its world as parameters (config, layout, a
//! shutdown token, reload requests): it reads no environment and installs
//! no signal handler. The loop does its small synchronous file operations
//! (a claim is a rename and a few fsynced writes) inline: one owner of the
//! queue needs no locks.
//!
//! - `start.rs` — the root made and checked; what is on disk reconciled before the first claim.
//! - `claims.rs` — what the watcher and rescans report; settling, deferrals, retry requests.
//! - `inbox_watch.rs` — the inbox's watch started, and how often to rescan.
//! - `schedule.rs` — which queued job starts next; `schedule/queue.rs` the queue's order.
//! - `monitors.rs` — monitors started and kept busy job after job; idle ones retired.
//! - `job_ends.rs` — jobs' ends reported, monitors' exits, interrupted jobs and their orphans.
//! - `owed_rows.rs` — ledger rows of ends the ledger did not take.
//! - `notices.rs` — what the hooks are told, and when.
//! - [`notify`] — systemd's notification protocol: ready, status, watchdog.
//! - `tick.rs` — the heartbeat; the clock watched; retention and the reconcile on timers.
//! - `startup_check.rs` — the start-up check, acted on by the loop.
//! - `published_watch.rs` — the reconcile of published work, one pass at a time.
//! - `slurm_watch.rs` — one `squeue` for every Slurm job, written to `slurm.json`.
//! - [`control`] — the config reloaded on request (SIGHUP).
//! - [`lock`] — single instance; the running daemon proven for `reload`.
//! - [`state_file`] — `daemon.json`.
//! - `ledger_state.rs` — its hold on `ledger.db`: reopened, checked, let go when damaged.

mod claims;
pub mod control;
mod inbox_watch;
mod job_ends;
mod ledger_state;
pub mod lock;
mod monitors;
mod notices;
pub mod notify;
mod owed_rows;
mod published_watch;
mod schedule;
mod slurm_watch;
mod start;
mod startup_check;
pub mod state_file;
mod tick;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use tokio_util::time::DelayQueue;

use jobwarden_engine::failure::DaemonError;
use jobwarden_engine::inbox::{Found, InboxWatcher, Signal};
use jobwarden_engine::recover;
use jobwarden_ledger::Ledger;
use jobwarden_model::abort;
use jobwarden_model::config::{Config, ShutdownPolicy};
use jobwarden_model::job::JobId;
use jobwarden_model::layout::{Layout, PromptName};
use jobwarden_sys::clock::Timestamp;
use jobwarden_sys::storage;

use state_file::{DaemonFile, Phase};

/// Run the daemon until `shutdown` is cancelled, reloading its config on
/// each of `reloads`' requests and telling the service manager how it goes
/// through `notifier`.
pub async fn run(
    config: Arc<Config>,
    layout: Layout,
    shutdown: CancellationToken,
    notifier: notify::Notifier,
    reloads: control::Reloads,
) -> Result<(), DaemonError> {
    start::prepare_root(&layout)?;
    monitors::raise_fd_limit();
    let _lock = lock::acquire(&layout)?;
    // Before any monitor is started: they inherit the daemon's cgroup.
    let leaf = jobwarden_sys::cgroup::take_supervisor_leaf();
    start::check_same_filesystem(&layout, config.shared_inbox.is_some())?;
    start::check_not_shared_unsaid(&layout, config.shared_inbox.is_some())?;
    state_file::set_aside_if_corrupt(&layout);
    let mut daemon = Daemon::new(config, layout);
    daemon.monitors.cgroup_controllers = !matches!(leaf, jobwarden_sys::cgroup::Leaf::Moved(_));
    match &leaf {
        jobwarden_sys::cgroup::Leaf::Placed(at) => {
            tracing::info!(cgroup = %at.display(), "each job gets a cgroup of its own beside the daemon's")
        }
        jobwarden_sys::cgroup::Leaf::Moved(at) => tracing::info!(
            cgroup = %at.display(),
            "moved into the delegated cgroup's supervisor leaf: each job gets a cgroup of its own beside it, without controllers (DelegateSubgroup=supervisor, systemd 254, gives memory and pids limits too)"
        ),
        jobwarden_sys::cgroup::Leaf::None(why) => {
            tracing::debug!("jobs get no cgroup of their own: {why}")
        }
    }
    daemon.notifier = notifier;
    daemon.control.listen(reloads);
    // The ledger drives cooldowns and retries. A damaged one does not stop
    // jobs (see `daemon/ledger_state.rs`); one that cannot be opened for
    // another reason stops the start, naming the file.
    let mut ledger = daemon.open_ledger_at_start()?;
    daemon.write_state(Phase::Starting);
    // A job `jobwarden abort` is making and ending itself must not be
    // found half-made: take turns with it (see `cancel.rs`).
    // Before the reconciliation, however long: other hosts see this one
    // alive from its start.
    daemon.renew_lease();
    let turn = daemon.turn_for_recovery();
    let mut recovered = daemon.reconcile_at_start(ledger.as_mut());
    drop(turn);
    daemon.note_recovered_claims(&mut recovered);
    if ledger.is_some() {
        daemon.ledger = ledger;
        daemon.ledger_identity = file_identity(&daemon.layout.ledger());
    }
    let signals = daemon.start_watching();
    // A pause outlives restarts: read before the first job can start.
    daemon.refresh_pauses();
    daemon.refresh_limits();
    daemon.take_recovered(recovered);
    daemon.ready_spare();
    daemon.renew_lease();
    daemon.rescan();
    daemon.dispatch();
    daemon.write_state(Phase::Running);
    let status = daemon.status_line();
    daemon.notifier.ready(&status);
    tracing::info!(root = %daemon.layout.root().display(), config = %daemon.config.source, "daemon ready");
    // Start-up's code (the arguments, the config, the ledger's migrations,
    // the recovery) does not run again (see `memory`).
    jobwarden_sys::memory::release_after_work();
    // After the first claims, off the loop: the ledger's quick check, and
    // what start-up did not read (see `recover.rs`).
    daemon.start_startup_check();
    daemon.reconcile_published();
    let result = daemon.event_loop(signals, shutdown).await;
    daemon.stop_startup_check();
    daemon.watcher = None;
    daemon.stopping = true;
    // Their stdin closed, idle monitors exit; busy ones after their job.
    daemon.monitors.retire_idle(false);
    let policy = format!("{:?}", daemon.config.shutdown).to_lowercase();
    let status = format!("stopping ({policy}); {}", daemon.status_line());
    daemon.notifier.stopping(&status);
    let result = match result {
        Ok(()) => daemon.wind_down().await,
        Err(e) => Err(e),
    };
    daemon.commit_owed_moves();
    daemon.write_state(Phase::Stopped);
    tracing::info!(
        running = daemon.running.len(),
        "daemon stopped; running jobs continue under their monitors"
    );
    result
}

/// A job holding a slot.
enum Slot {
    /// Started by this daemon; its end arrives through `monitors`.
    Child,
    /// Supervised by a monitor this daemon did not start (found at start,
    /// or a duplicate start refused): this proven process, checked each tick.
    Adopted(jobwarden_sys::procfs::Proc),
}

struct Daemon {
    config: Arc<Config>,
    layout: Layout,
    host: String,
    started_at: Timestamp,
    watcher: Option<InboxWatcher>,
    /// Claimed jobs waiting to start, what running jobs hold, and the
    /// pauses in force (see `daemon/schedule.rs`).
    sched: schedule::Schedule,
    running: HashMap<JobId, Slot>,
    /// The monitors this daemon started, busy or waiting for a job.
    monitors: monitors::Pool,
    /// When the next idle monitor is started, after the last was handed a job.
    spare_due: Option<tokio::time::Instant>,
    /// More than [`BACKLOG`] jobs were queued at once: their memory is
    /// given back once they are done (see `Daemon::release_memory`).
    backlog_seen: bool,
    /// Waits for killed orphaned process groups of interrupted jobs to be
    /// gone (true) or to outlive the wait (false); the job ends after.
    clearing: JoinSet<(recover::Clearing, bool)>,
    /// Prompts whose `.running.md` name is held by an earlier job of the
    /// same prompt: retried when that job ends.
    blocked: HashMap<PromptName, PathBuf>,
    /// While a row of ends is finished as one group (`job_ends.rs`).
    ending: Option<job_ends::EndGroup>,
    /// The job that holds each prompt's `.running.md`, for the claims this
    /// daemon made. A job that ended and requeued its prompt may be settled
    /// after the prompt was claimed again: the claim is then the new job's,
    /// and the old job's end must not move it.
    claims: HashMap<PromptName, JobId>,
    /// Files found by a rescan that are not yet `settle` old.
    settling: DelayQueue<Found>,
    settling_paths: HashSet<PathBuf>,
    /// Prompts in cooldown: until when (epoch ms), and where they wait.
    deferred: HashMap<PromptName, (u64, PathBuf)>,
    cooling: DelayQueue<PathBuf>,
    /// None while `ledger.db` is damaged (`ledger_condition` says why).
    ledger: Option<Ledger>,
    /// Device and inode of the `ledger.db` held open (or found damaged).
    ledger_identity: Option<(u64, u64)>,
    /// Jobs claimed to start at once whose view their claim left to their
    /// monitor, until they start (see `Daemon::starts_at_once`).
    views_owed: HashSet<JobId>,
    /// `ledger.db` was looked at in this turn of the loop (it is looked
    /// at once a turn, however many claims and ends the turn records).
    ledger_looked: bool,
    ledger_condition: jobwarden_ledger::health::Condition,
    /// The start's `PRAGMA quick_check`, until its verdict is taken.
    quick_check: Option<std::sync::mpsc::Receiver<ledger_state::Verdict>>,
    gc_running: Arc<AtomicBool>,
    published: published_watch::PublishedWatch,
    /// The one poll of Slurm for every Slurm job.
    slurm: slurm_watch::SlurmWatch,
    /// The `[[notify]]` hooks' deliveries.
    hooks: jobwarden_engine::hooks::Hub,
    /// A job was claimed or ended since `all_done` was last told.
    work_seen: bool,
    /// Jobs cancelled whose end the hooks were told, with when each was
    /// claimed (epoch ms): the look for ends made by hand skips them.
    told_cancelled: HashMap<JobId, u64>,
    /// When the tick last looked for ends made by hand (epoch ms; see
    /// `notices.rs`).
    by_hand_since: u64,
    /// When `all_done` is told, if the queue stays drained until then.
    all_done_due: Option<tokio::time::Instant>,
    /// From drop to claim, of the prompts claimed since start.
    claim_latency: jobwarden_engine::metrics::Histogram,
    /// Shutting down: nothing is claimed or started any more.
    stopping: bool,
    /// Claims are being made in a group commit (`Daemon::claiming`): no
    /// job starts until their writes are durable.
    holding_starts: bool,
    /// A dispatch is under way (see `Daemon::dispatch`), and one was asked
    /// for meanwhile.
    dispatching: bool,
    dispatch_again: bool,
    /// Queued jobs to end `cancelled` after this dispatch: a job each
    /// waited for ended other than `succeeded` (why).
    doomed: Vec<(JobId, String)>,
    /// The folder syncs of prompts moved after their jobs' ends, made on
    /// the next tick (see `job_ends.rs`).
    owed_moves: jobwarden_sys::fsio::Deferred,
    /// Prompts whose claim failed since the last rescan (which retries them).
    claim_failed: HashSet<PathBuf>,
    /// Keeps the signal channel open when there is no watcher.
    idle_sender: Option<tokio::sync::mpsc::UnboundedSender<Signal>>,
    watch_degraded: bool,
    /// Why the watch was lost, when it could not be re-established.
    watch_problem: Option<String>,
    /// Why `inbox/` is refused (a symlink, not a folder): nothing is
    /// claimed while this is set.
    inbox_refused: Option<String>,
    notifier: notify::Notifier,
    /// Whether the root accepts writes; while not, nothing is claimed or
    /// started.
    storage: storage::Health,
    /// Jobs whose monitor is gone but whose end could not be recorded yet
    /// (storage refusing writes): retried every tick.
    /// The value says how the monitor ended.
    unsettled: HashMap<JobId, String>,
    /// Ended jobs whose ledger row or index row the ledger did not take:
    /// written from their records once it does (`owed_rows.rs`).
    owed_rows: std::collections::BTreeSet<JobId>,
    /// How many monitors each Slurm job has had to be given again.
    reattached: HashMap<JobId, u32>,
    /// Reload requests, and the config state `daemon.json` reports.
    control: control::Control,
    /// Interrupted jobs whose orphaned process group is being waited for.
    clearing_jobs: HashSet<JobId>,
    /// The full pass over `runs/` made after the first claims.
    startup: startup_check::StartupCheck,
    /// Steps of the wall clock, looked for at each tick.
    clock: jobwarden_sys::clock::StepWatch,
    /// What this daemon has seen of the other hosts sharing its inbox.
    shared: jobwarden_engine::shared_inbox::Sweep,
    /// This host's lease could not be renewed (reported once).
    lease_failing: bool,
    /// When this host's lease was last renewed.
    lease_renewed: Option<std::time::Instant>,
}

impl Daemon {
    fn new(config: Arc<Config>, layout: Layout) -> Self {
        let host = config
            .shared_inbox
            .as_ref()
            .map_or_else(jobwarden_sys::host::hostname, |s| s.host.clone());
        let hooks =
            jobwarden_engine::hooks::Hub::new(layout.clone(), config.notify.clone(), config.events);
        Daemon {
            control: control::Control::new(&config),
            config,
            layout,
            host,
            started_at: Timestamp::now(),
            watcher: None,
            sched: schedule::Schedule::default(),
            running: HashMap::new(),
            monitors: monitors::Pool::new(),
            spare_due: None,
            backlog_seen: false,
            clearing: JoinSet::new(),
            blocked: HashMap::new(),
            ending: None,
            claims: HashMap::new(),
            settling: DelayQueue::new(),
            settling_paths: HashSet::new(),
            deferred: HashMap::new(),
            cooling: DelayQueue::new(),
            ledger: None,
            ledger_identity: None,
            views_owed: HashSet::new(),
            ledger_looked: false,
            ledger_condition: jobwarden_ledger::health::Condition::ok(),
            quick_check: None,
            gc_running: Arc::new(AtomicBool::new(false)),
            published: Default::default(),
            slurm: Default::default(),
            hooks,
            work_seen: false,
            told_cancelled: HashMap::new(),
            by_hand_since: Timestamp::now().epoch_ms(),
            all_done_due: None,
            claim_latency: jobwarden_engine::metrics::Histogram::new(
                &jobwarden_engine::metrics::CLAIM_LATENCY_BOUNDS_MS,
            ),
            stopping: false,
            holding_starts: false,
            dispatching: false,
            dispatch_again: false,
            doomed: Vec::new(),
            owed_moves: jobwarden_sys::fsio::Deferred::default(),
            idle_sender: None,
            claim_failed: HashSet::new(),
            watch_degraded: false,
            watch_problem: None,
            inbox_refused: None,
            notifier: notify::Notifier::disabled(),
            storage: storage::Health::default(),
            unsettled: HashMap::new(),
            owed_rows: Default::default(),
            reattached: HashMap::new(),
            clearing_jobs: HashSet::new(),
            startup: startup_check::StartupCheck::default(),
            clock: jobwarden_sys::clock::StepWatch::new(),
            shared: Default::default(),
            lease_failing: false,
            lease_renewed: None,
        }
    }

    async fn event_loop(
        &mut self,
        mut signals: tokio::sync::mpsc::UnboundedReceiver<Signal>,
        shutdown: CancellationToken,
    ) -> Result<(), DaemonError> {
        let mut rescan = interval_after(self.rescan_period());
        let mut tick = interval_after(self.config.heartbeat_interval);
        let mut gc = interval_after(self.config.retention.gc_interval);
        let mut reconcile = interval_after(self.config.reconcile_interval);
        let mut slurm_poll = interval_after(self.config.slurm_poll_interval);
        // Pinged from this loop, so a wedged loop is what stops the pings.
        let watchdog_period = self.notifier.watchdog_period();
        let mut watchdog = interval_after(watchdog_period.unwrap_or(Duration::from_secs(3600)));
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = watchdog.tick(), if watchdog_period.is_some() => self.notifier.watchdog(),
                _ = self.control.next_request() => self.reload(),
                signal = signals.recv() => match signal {
                    Some(signal) => self.on_signals(signal, &mut signals),
                    None => return Err(DaemonError::TaskDied { task: "inbox watcher", reason: "its channel closed".into() }),
                },
                report = self.monitors.next() => self.on_monitor_reports(report),
                Some(joined) = self.clearing.join_next() => self.on_group_cleared(joined)?,
                found = self.startup.next() => self.on_startup_found(found),
                Some(expired) = std::future::poll_fn(|cx| self.settling.poll_expired(cx)) => {
                    self.on_settled(expired.into_inner());
                }
                Some(expired) = std::future::poll_fn(|cx| self.cooling.poll_expired(cx)) => {
                    self.on_cooled(expired.into_inner());
                }
                _ = sleep_until(self.all_done_due), if self.all_done_due.is_some() => self.on_all_done(),
                _ = sleep_until(self.spare_due), if self.spare_due.is_some() => {
                    self.spare_due = None;
                    self.ready_spare();
                }
                _ = rescan.tick() => self.rescan(),
                _ = tick.tick() => self.on_tick(),
                _ = gc.tick() => self.collect_garbage(),
                _ = reconcile.tick() => self.reconcile_published(),
                _ = slurm_poll.tick(), if self.config.uses_slurm() => {
                    self.slurm.poll(&self.layout, self.running.keys());
                }
            }
            self.watch_all_done();
            self.follow_intervals([
                (&mut rescan, self.rescan_period()),
                (&mut tick, self.config.heartbeat_interval),
                (&mut gc, self.config.retention.gc_interval),
                (&mut reconcile, self.config.reconcile_interval),
                (&mut slurm_poll, self.config.slurm_poll_interval),
            ]);
            self.release_memory();
            self.ledger_looked = false;
        }
    }

    /// Once a backlog (more than [`BACKLOG`] jobs queued at once) has
    /// drained and its last job ended, give its memory back: the tables
    /// keep the capacity they grew to, and the allocator keeps freed pages.
    /// Checked after every event, at the cost of three comparisons.
    fn release_memory(&mut self) {
        if !self.backlog_seen || self.sched.queue.len() > 0 || !self.running.is_empty() {
            return;
        }
        self.backlog_seen = false;
        self.sched.shrink_to_fit();
        self.claims.shrink_to_fit();
        self.running.shrink_to_fit();
        self.blocked.shrink_to_fit();
        self.deferred.shrink_to_fit();
        self.settling_paths.shrink_to_fit();
        self.claim_failed.shrink_to_fit();
        self.unsettled.shrink_to_fit();
        self.clearing_jobs.shrink_to_fit();
        self.settling.shrink_to_fit();
        self.cooling.shrink_to_fit();
        if let Some(ledger) = &self.ledger {
            ledger.release_memory();
        }
        jobwarden_sys::memory::release_free_memory();
        tracing::debug!("a backlog drained; its memory was given back");
    }

    // -- scheduling (see `daemon/schedule.rs`) ---------------------------------

    /// Hand job `id` to a monitor: an idle one, else a new one (see
    /// `daemon/monitors.rs`). It runs in its own session, so that it and
    /// its job outlive this daemon. Another idle monitor is made ready for
    /// the next job shortly after.
    fn spawn_monitor(&mut self, id: &JobId) -> std::io::Result<()> {
        let _span = tracing::info_span!("job", id = %id).entered();
        if !self.monitors.hand(id) {
            self.monitors.start(&self.layout, &self.config.text)?;
            if !self.monitors.hand(id) {
                return Err(std::io::Error::other("the monitor just started is gone"));
            }
        }
        tracing::debug!(job = %id, "handed to a monitor");
        if !self.monitors.has_idle() {
            // Not at once: on a small machine the new monitor's exec would
            // take a core from the one that is starting its job right now.
            self.spare_due
                .get_or_insert_with(|| tokio::time::Instant::now() + monitors::READY_AFTER);
        }
        Ok(())
    }

    /// Have a monitor waiting for the next job, unless stopping.
    fn ready_spare(&mut self) {
        if self.monitors.has_idle() || self.stopping {
            return;
        }
        if let Err(e) = self.monitors.start(&self.layout, &self.config.text) {
            tracing::warn!("starting a monitor ahead of need: {e}; jobs start without one");
        }
    }

    // -- periodic ------------------------------------------------------------

    /// The shutdown policy: `detach` leaves running jobs to their monitors;
    /// `drain` waits for them; `abort` writes their ABORT markers (reason
    /// `shutdown`) and waits. Both waits end at `drain_timeout`, after which
    /// the rest is detached. Queued jobs stay queued for the next start.
    async fn wind_down(&mut self) -> Result<(), DaemonError> {
        match self.config.shutdown {
            ShutdownPolicy::Detach => return Ok(()),
            ShutdownPolicy::Drain => {}
            ShutdownPolicy::Abort => {
                for id in self.running.keys() {
                    if let Err(e) = abort::write_marker(&self.layout, id, Some("shutdown")) {
                        tracing::error!(job = %id, "{e}");
                    }
                }
            }
        }
        tracing::info!(running = self.running.len(), policy = ?self.config.shutdown, "waiting for running jobs to end");
        let deadline = Instant::now() + self.config.drain_timeout;
        while !self.running.is_empty() {
            tokio::select! {
                report = self.monitors.next() => self.on_monitor_reports(report),
                _ = tokio::time::sleep(self.config.heartbeat_interval) => self.on_tick(),
                _ = tokio::time::sleep_until(deadline) => {
                    tracing::warn!(running = self.running.len(), "drain_timeout reached; leaving the rest to their monitors");
                    break;
                }
            }
        }
        Ok(())
    }

    /// Deferred prompts, soonest cooldown end first (at most `LISTED`).
    fn deferred_list(&self) -> Vec<state_file::Deferred> {
        let mut list: Vec<state_file::Deferred> = self
            .deferred
            .iter()
            .map(|(prompt, (until, _))| state_file::Deferred {
                prompt: prompt.to_string(),
                until: Timestamp::from(std::time::UNIX_EPOCH + Duration::from_millis(*until)),
            })
            .collect();
        list.sort_by_key(|d| d.until.epoch_ms());
        list.truncate(state_file::LISTED);
        list
    }

    fn write_state(&mut self, phase: Phase) {
        let (watch, watch_reason) = self.watch_state();
        let sandbox = jobwarden_sys::child::state(self.layout.root(), true);
        let file = DaemonFile {
            pid: std::process::id(),
            started_at: self.started_at,
            heartbeat_at: Timestamp::now(),
            version: env!("CARGO_PKG_VERSION"),
            host: &self.host,
            root: self.layout.root(),
            phase,
            running: self.running.len(),
            queued: self.sched.queue.len(),
            watch: watch.as_str(),
            watch_reason,
            sandbox: sandbox.name(),
            sandbox_reason: sandbox.why_not(),
            storage: &self.storage,
            ledger: &self.ledger_condition,
            unsettled: self.unsettled.len(),
            queue: self.queue_listing(),
            deferred: self.deferred_list(),
            config: &self.control.state,
            startup_check: self.startup.state(),
            metrics: jobwarden_engine::metrics::DaemonMetrics {
                claim_latency: self.claim_latency.clone(),
                log_lines_dropped: jobwarden_sys::logging::log_lines_dropped(),
                notifications_dropped: self.hooks.dropped(),
                cooldowns: self.deferred.len() as u64,
            },
        };
        if let Some(condition) = state_file::write(&self.layout, &file) {
            self.storage_failed(condition, "daemon.json could not be written".into());
        }
    }
}

/// Device and inode of a file, if it exists.
fn file_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    // What is at the name itself: a link swapped in is a new identity.
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// An interval whose first tick is one period from now, and which does not
/// try to catch up on missed ticks.
fn interval_after(period: Duration) -> tokio::time::Interval {
    let mut i = tokio::time::interval_at(Instant::now() + period, period);
    i.set_missed_tick_behavior(MissedTickBehavior::Delay);
    i
}

/// Queued jobs beyond which the daemon gives memory back once they are done.
const BACKLOG: usize = 64;

/// Sleep until `due` (never, without one: its branch is then disabled).
async fn sleep_until(due: Option<tokio::time::Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}
