//! The daemon's side of the start-up check (`recover/sweep.rs`): started
//! once the first claims are made, on a thread of its own at the lowest
//! priority, with its own ledger connection, a second later; what it finds
//! arrives here, on the loop, and is acted
//! on under the turn at `claim.lock` (so that a job `jobwarden abort` is
//! making and ending is never found half-made), skipping the jobs this
//! daemon owns — those in a slot, queued, being cleared or waiting to be
//! settled, whose ends are already its business. `daemon.json` says
//! `startup_check: "running"` until it is done.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::Daemon;
use super::state_file::Phase;
use jobwarden_engine::recover::sweep::{Findings, Found, Report};
use jobwarden_engine::recover::{self, Pass, Recovered};
use jobwarden_ledger::{Ledger, backfill};
use jobwarden_model::job::{JobId, JobRecord};

/// How many messages the check may have sent ahead of the loop.
const AHEAD: usize = 4;

/// How many of the jobs claimed while the check runs it is told to leave
/// alone (a few MiB of ids at most).
const MADE_HERE_MAX: usize = 65_536;

/// How long after the first claims the check begins: the jobs they
/// started get the machine first (a job starts within tens of
/// milliseconds; the check of a million run folders and the read of every
/// page of the ledger take minutes, and even at the lowest priority they
/// share the memory bus and the kernel's time with a starting job).
const LET_JOBS_START: Duration = Duration::from_secs(1);

/// The start-up check, from the start-up reconciliation to its end.
#[derive(Default)]
pub(super) struct StartupCheck {
    rx: Option<mpsc::Receiver<Found>>,
    /// A message waiting for the turn at `claim.lock`.
    pending: Option<Found>,
    /// The claimed prompts the start-up reconciliation's records hold.
    held: HashSet<PathBuf>,
    /// Whether a live monitor's prompt was unknown at start.
    unknown_claims: bool,
    /// The jobs this daemon claimed while the check had not finished:
    /// theirs is the loop's business from claim to end, not the check's,
    /// which is for what an earlier daemon left (a check begun just after
    /// a burst of claims would otherwise read each of them again and look
    /// for its monitor). Emptied when the check is done.
    made_here: HashSet<JobId>,
    started: Option<Instant>,
    rows_inserted: usize,
    done: bool,
    /// It could not be started.
    failed: bool,
}

impl StartupCheck {
    /// What `daemon.json` says of it.
    pub(super) fn state(&self) -> &'static str {
        match (self.done, self.failed) {
            (true, _) => "done",
            (false, true) => "failed",
            (false, false) => "running",
        }
    }

    /// The next message, once the previous one was acted on; never, when
    /// the check is over.
    pub(super) async fn next(&mut self) -> Option<Found> {
        match (&mut self.rx, &self.pending) {
            (Some(rx), None) => rx.recv().await,
            _ => std::future::pending().await,
        }
    }
}

impl Daemon {
    /// Remember that this daemon claimed job `id`, while the check may
    /// still find it. At most [`MADE_HERE_MAX`] are remembered: a check
    /// of a huge `runs/` under a long burst judges the jobs claimed beyond
    /// them as it judges an earlier daemon's (correctly, at its old cost),
    /// rather than let the set grow with the burst.
    pub(super) fn note_made_here(&mut self, id: &JobId) {
        if !self.startup.done
            && !self.startup.failed
            && self.startup.made_here.len() < MADE_HERE_MAX
        {
            self.startup.made_here.insert(id.clone());
        }
    }

    /// Is job `id` none of the check's business: this daemon's now, or
    /// claimed by it since it started?
    fn not_the_checks(&self, id: &JobId) -> bool {
        self.owns(id) || self.startup.made_here.contains(id)
    }

    /// Remember what the start-up reconciliation knows of claimed prompts.
    pub(super) fn note_recovered_claims(&mut self, recovered: &mut Recovered) {
        self.startup.held = std::mem::take(&mut recovered.held);
        self.startup.unknown_claims = recovered.unknown_claims;
    }

    /// Start the check on a thread of its own, at the lowest priority: it
    /// is never in a hurry, and the jobs that start meanwhile are. (A
    /// panic there stops the daemon like any other: see the panic hook in
    /// `commands::daemon`. A stopping daemon does not wait for it.)
    /// The ledger's quick check (`ledger_state.rs`) runs there first: it is
    /// as little in a hurry.
    pub(super) fn start_startup_check(&mut self) {
        let (tx, rx) = mpsc::channel(AHEAD);
        let (layout, host) = (self.layout.clone(), self.host.clone());
        let config = self.config.clone();
        self.startup.rx = Some(rx);
        self.startup.started = Some(Instant::now());
        let quick_check = self.quick_check_job();
        // A damaged ledger is the loop's to report, once.
        let with_ledger = self.ledger.is_some();
        let check = move || {
            lower_priority();
            std::thread::sleep(LET_JOBS_START);
            if let Some(quick_check) = quick_check {
                quick_check();
            }
            let ledger = match with_ledger.then(|| Ledger::open(&layout.ledger())) {
                Some(Ok(ledger)) => Some(ledger),
                Some(Err(e)) if !e.is_damaged() => {
                    tracing::warn!("start-up check without the ledger: {e}");
                    None
                }
                _ => None,
            };
            let mut send = |found| tx.blocking_send(found).is_ok();
            recover::sweep::check(&layout, &config, &host, ledger, &mut send, &|| {
                tx.is_closed()
            });
        };
        let started = std::thread::Builder::new()
            .name("startup-check".into())
            .spawn(check);
        if let Err(e) = started {
            tracing::error!("starting the start-up check: {e}; it is made at the next start");
            self.startup.rx = None;
            self.startup.failed = true;
            self.startup.made_here = HashSet::new();
        }
    }

    /// A message of the check: acted on now if the turn is free, else
    /// kept for the next heartbeat.
    pub(super) fn on_startup_found(&mut self, found: Option<Found>) {
        let Some(found) = found else {
            // The check ended without its report (it panicked: the hook
            // stops the daemon) or the loop is shutting down.
            self.startup.rx = None;
            return;
        };
        let Some(turn) = self.turn_now() else {
            self.startup.pending = Some(found);
            return;
        };
        match found {
            Found::Rows(ids) => {
                self.backfill_rows(ids);
                drop(turn);
            }
            Found::Done(mut findings) => {
                let report = std::mem::take(&mut findings.report);
                let recovered = self.reconcile_findings(findings);
                drop(turn);
                self.startup_check_done(recovered, &report);
            }
        }
    }

    /// A stopping daemon lets the check go: it stops at its next record.
    pub(super) fn stop_startup_check(&mut self) {
        self.startup.rx = None;
        self.startup.pending = None;
    }

    /// Act on a message kept for want of the turn.
    pub(super) fn retry_startup_found(&mut self) {
        if let Some(found) = self.startup.pending.take() {
            self.on_startup_found(Some(found));
        }
    }

    /// The turn at `claim.lock` if nobody holds it now.
    fn turn_now(&self) -> Option<jobwarden_engine::cancel::Turn> {
        match jobwarden_engine::cancel::take_turn(&self.layout, Duration::ZERO) {
            Ok(turn) => turn,
            Err(e) => {
                tracing::warn!("{e}; the start-up check waits for the next heartbeat");
                None
            }
        }
    }

    /// Is job `id` this daemon's: in a slot, queued, being cleared, or
    /// waiting for its end to be recorded?
    pub(super) fn owns(&self, id: &JobId) -> bool {
        self.running.contains_key(id)
            || self.unsettled.contains_key(id)
            || self.clearing_jobs.contains(id)
            || self.sched.queue.ids().any(|q| q == id)
    }

    /// The ledger rows of ended jobs that lack them, from their records
    /// (a job whose monitor still runs writes its own).
    fn backfill_rows(&mut self, ids: Vec<JobId>) {
        let ids: Vec<JobId> = ids
            .into_iter()
            .filter(|id| !self.not_the_checks(id))
            .collect();
        let Some(ledger) = self.ledger.as_mut() else {
            return;
        };
        for id in ids {
            let Ok(rec) = JobRecord::load_job(&self.layout, &id) else {
                continue;
            };
            let alive = matches!(
                recover::monitor_state_of(&self.layout, &id, Some(&rec)),
                recover::Monitor::Alive(_)
            );
            if !rec.state.is_terminal() || alive {
                continue;
            }
            match backfill::ensure_row(&self.layout, ledger, &rec) {
                Ok(inserted) => self.startup.rows_inserted += usize::from(inserted),
                Err(e) => tracing::warn!(job = %id, "backfilling its ledger row: {e}"),
            }
        }
    }

    /// The jobs the listing found that the start-up reconciliation did not
    /// take, judged as it would have (see `recover/pass.rs`), then the
    /// claimed prompts the check began with. Jobs this daemon owns, or
    /// claimed since it started, are skipped, and the prompts they claimed
    /// are held.
    fn reconcile_findings(&mut self, findings: Findings) -> Recovered {
        let mut held = findings.held;
        held.extend(self.startup.held.iter().cloned());
        held.extend(self.claims.keys().map(|p| self.layout.running_prompt(p)));
        let judge: Vec<JobId> = findings
            .unended
            .into_iter()
            .chain(findings.corrupt)
            .filter(|id| !self.not_the_checks(id))
            .collect();
        // A prompt this daemon claimed is never the check's to settle:
        // held, whatever became of its job (the loop finishes its move).
        let mut ended = Vec::new();
        for (running, id) in findings.ended {
            if self.not_the_checks(&id) {
                held.insert(running);
            } else {
                ended.push(id);
            }
        }
        let layout = &self.layout;
        for id in findings.behind.iter().filter(|id| !self.not_the_checks(id)) {
            if let Ok((mut rec, true)) = JobRecord::load_job_view(layout, id)
                && recover::live_monitor(layout, id, Some(&rec)).is_none()
            {
                recover::write_view_again(layout, &mut rec);
            }
        }
        let mut pass = Pass::new(layout, &self.config, &self.host, self.ledger.as_mut());
        pass.held = held;
        pass.unknown_claims = self.startup.unknown_claims;
        // One pass over `/proc` for all of them: a record's pid and start
        // time and a lock file are the job's to write.
        let live = (!judge.is_empty()).then(|| recover::LiveMonitors::scan(layout));
        for id in judge {
            let loaded =
                JobRecord::load_job(layout, &id).map_err(jobwarden_engine::failure::JobError::from);
            let rec = loaded.as_ref().ok();
            let monitor = recover::live_monitor(layout, &id, rec)
                .or_else(|| live.as_ref().and_then(|l| l.of(&id, rec)));
            pass.job(id, loaded, monitor);
        }
        for id in ended {
            let Ok(rec) = JobRecord::load_job(layout, &id) else {
                continue;
            };
            if rec.state.is_terminal() && recover::live_monitor(layout, &id, Some(&rec)).is_none() {
                pass.ended_record(rec);
            }
        }
        pass.settle_claims(findings.claimed);
        pass.finish()
    }

    /// Take over what the check found, let prompts that waited for a
    /// claimed name try again, and say the check is done.
    fn startup_check_done(&mut self, recovered: Recovered, report: &Report) {
        self.take_recovered(recovered);
        let blocked: Vec<_> = self.blocked.keys().cloned().collect();
        for prompt in blocked {
            self.unblock(&prompt);
        }
        self.rescan();
        self.dispatch();
        self.startup.rx = None;
        self.startup.done = true;
        self.startup.made_here = HashSet::new();
        // What start-up ran (the config, the recovery, this check) does not
        // run again: its heap and its code's pages go back (see `memory`).
        jobwarden_sys::memory::release_after_work();
        let took = self
            .startup
            .started
            .map(|t| t.elapsed())
            .unwrap_or_default();
        tracing::info!(
            took = %humantime::format_duration(std::time::Duration::from_millis(took.as_millis() as u64)),
            run_folders = report.checked,
            rows_backfilled = self.startup.rows_inserted,
            index_rows_written = report.reindexed,
            index_rows_dropped = report.unindexed,
            failed = report.failed,
            "start-up check done"
        );
        self.write_state(if self.stopping {
            Phase::Stopping
        } else {
            Phase::Running
        });
    }
}

/// Give the calling thread the lowest priority (nice 19; Linux keeps the
/// nice value per thread). Best effort: the check is right at any speed.
fn lower_priority() {
    let tid = nix::unistd::gettid().as_raw();
    // SAFETY: setpriority takes three integers and touches no memory.
    let set = unsafe { libc::setpriority(libc::PRIO_PROCESS as _, tid as libc::id_t, 19) };
    if set != 0 {
        tracing::debug!(
            "start-up check at normal priority: {}",
            std::io::Error::last_os_error()
        );
    }
}
