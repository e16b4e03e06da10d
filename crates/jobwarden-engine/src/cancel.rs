//! Cancelling what has not started: it ends `cancelled` (DESIGN §3), with
//! the reason, a ledger row and its prompt in `archive/cancelled/`, like
//! every other end.
//!
//! - A prompt still in the inbox is claimed by the canceller itself, with
//!   the daemon's own claim ([`Claimer::claim_to_cancel`]): the atomic
//!   rename lets exactly one claimer win. If the daemon wins, the caller
//!   falls back to the ABORT marker of the job the daemon made.
//! - A queued job that no monitor took is ended by whoever holds its
//!   place in a queue: the daemon, when it sees the job's ABORT marker
//!   ([`Canceller::end_queued`]); the CLI itself when no daemon runs
//!   ([`Canceller::cancel_queued_alone`]), since none would see it before
//!   its next start.
//!
//! A job the CLI makes and ends must never be seen half-made by a daemon
//! that starts meanwhile: its recovery would queue it. The two take turns
//! at `claim.lock` ([`take_turn`]): the CLI holds it while it claims and
//! ends, a starting daemon while it reconciles (before its first claim, and
//! again each time its start-up check acts on what it found in `runs/`). A
//! daemon holds `daemon.lock` for its whole life, which is how the CLI
//! knows, under the turn, that no daemon will queue a job it ends alone.

use std::fs::File;
use std::time::{Duration, Instant};

use nix::fcntl::Flock;
use serde_json::json;

use crate::claim::{Claimed, Claimer, Prior};
use crate::failure::JobError;
use crate::retry;
use crate::terminal::{Ending, Finisher};
use jobwarden_model::events::{EventLog, Op};
use jobwarden_model::job::{JobId, JobRecord, JobState};
use jobwarden_model::layout::{Layout, PromptName};
use jobwarden_model::{abort, abort::Requested};
use jobwarden_sys::clock::Timestamp;
use jobwarden_sys::error::IoError;
use jobwarden_sys::fsio;

/// How long a canceller, or a starting daemon, waits for the other's turn.
pub const TURN_PATIENCE: Duration = Duration::from_secs(10);

/// How often a waiting turn looks again.
const TURN_POLL: Duration = Duration::from_millis(5);

/// A turn at `claim.lock`; released when dropped (or when the process dies).
pub struct Turn {
    _lock: Flock<File>,
}

/// Wait, at most `patience`, for the turn at `claim.lock`; `None` if it is
/// still held then. Polled rather than blocked on, so that a holder that
/// hangs (a stopped `abort`) delays a daemon's start, never stops it.
pub fn take_turn(layout: &Layout, patience: Duration) -> Result<Option<Turn>, IoError> {
    let deadline = Instant::now() + patience;
    loop {
        if let Some(lock) = fsio::try_lock(layout.root(), &layout.claim_lock())? {
            return Ok(Some(Turn { _lock: lock }));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(TURN_POLL);
    }
}

/// Does a daemon hold the root's lock? `None` when that cannot be told.
pub fn daemon_running(layout: &Layout) -> Option<bool> {
    jobwarden_sys::procfs::flock_holder(&layout.daemon_lock())
        .ok()
        .map(|holder| holder.is_some())
}

/// What became of a prompt asked to be cancelled while it waited.
#[derive(Debug)]
pub enum Cancelled {
    /// Claimed here and ended `cancelled`: its record.
    Ended(JobRecord),
    /// Claimed here and refused by the claim (it could never have run):
    /// `rejected`, its record says why.
    Rejected(JobRecord),
    /// Another claimer (the daemon) took it first, or it is gone.
    Lost,
}

/// What a cancel of a prompt waiting in the inbox did.
#[derive(Debug)]
pub enum WaitingCancelled {
    /// Claimed here and ended `cancelled`.
    Ended(JobRecord),
    /// Claimed here and refused by the claim (see [`Cancelled::Rejected`]).
    Rejected(JobRecord),
    /// The daemon claimed it first, as this job: it is the caller's to
    /// abort (no marker was written).
    ClaimedAs(JobId),
    /// No longer waiting, and no job of it appeared.
    Gone,
}

/// How long the job the daemon made from a prompt is looked for.
const FIND_PATIENCE: Duration = Duration::from_secs(5);
/// How often it is looked for.
const FIND_POLL: Duration = Duration::from_millis(20);

/// Cancel the prompt waiting as `prompt` (`before`: its newest job when
/// it was found waiting), as `jobwarden abort` and the web page do: take
/// the turn, claim it and end it; if the daemon claimed it first, find
/// the job it made (the job index shows it within an instant). `by` is
/// who asked (the CLI's operator when `None`). The ledger, when given,
/// gets the row; without one the daemon's next start backfills it.
pub fn cancel_waiting_by_hand(
    layout: &Layout,
    config: &jobwarden_model::config::Config,
    mut ledger: Option<&mut jobwarden_ledger::Ledger>,
    prompt: &PromptName,
    before: Option<&str>,
    reason: Option<&str>,
    by: Option<&str>,
) -> anyhow::Result<WaitingCancelled> {
    jobwarden_sys::fault::pause("abort-before-claim");
    let host = jobwarden_sys::host::hostname();
    let Some(turn) = take_turn(layout, TURN_PATIENCE)? else {
        anyhow::bail!(
            "{prompt}: {} stayed locked for {} (a daemon starting, or another abort); nothing was cancelled, try again",
            layout.claim_lock().display(),
            humantime::format_duration(TURN_PATIENCE)
        );
    };
    let mut canceller = Canceller {
        layout,
        config,
        host: &host,
        ledger: ledger.as_deref_mut(),
        view_owed: false,
    };
    match canceller.cancel_waiting(prompt, reason, by)? {
        Cancelled::Ended(rec) => return Ok(WaitingCancelled::Ended(rec)),
        Cancelled::Rejected(rec) => return Ok(WaitingCancelled::Rejected(rec)),
        Cancelled::Lost => drop(turn),
    }
    let deadline = Instant::now() + FIND_PATIENCE;
    loop {
        let newest = ledger
            .as_deref()
            .and_then(|l| l.newest_job_of(&prompt.project, &prompt.name).ok())
            .flatten()
            .filter(|j| Some(j.id.as_str()) != before)
            .and_then(|j| JobId::parse(&j.id).ok());
        match newest {
            Some(id) => return Ok(WaitingCancelled::ClaimedAs(id)),
            None if Instant::now() >= deadline => return Ok(WaitingCancelled::Gone),
            None => std::thread::sleep(FIND_POLL),
        }
    }
}

/// Everything a cancel needs is what a claim needs: a cancel of a waiting
/// prompt is a claim ([`Claimer::claim_to_cancel`]) ended at once.
pub type Canceller<'a> = Claimer<'a>;

impl Claimer<'_> {
    /// Claim the prompt waiting as `prompt` and end it `cancelled` at once,
    /// `reason` in its ABORT marker and record. Its attempt number is the
    /// one the daemon's claim would have given it. `by` is who asked (the
    /// CLI's operator when `None`). The caller holds the turn
    /// ([`take_turn`]).
    pub fn cancel_waiting(
        &mut self,
        prompt: &PromptName,
        reason: Option<&str>,
        by: Option<&str>,
    ) -> Result<Cancelled, JobError> {
        let path = self.layout.waiting_prompt(prompt);
        // A root no daemon has started on yet has no `runs/`.
        fsio::create_dirs(self.layout.root(), &self.layout.runs())?;
        let last = match self.ledger.as_deref() {
            Some(l) => l.last_run(&prompt.project, &prompt.name)?,
            None => None,
        };
        let request = retry::request::honoured(self.layout, prompt, &path, last.as_ref());
        let prior = Prior {
            requeued_by: retry::continues(last.as_ref(), request.as_ref()),
        };
        let claimed = self.claim_to_cancel(&path, prompt.clone(), &prior, reason, by)?;
        if let (Some(request), Claimed::Queued(_) | Claimed::Rejected(_)) = (&request, &claimed) {
            retry::request::clear_if(self.layout, prompt, request);
        }
        match claimed {
            Claimed::Queued(mut rec) => {
                self.end_queued(&mut rec, "waiting")?;
                Ok(Cancelled::Ended(rec))
            }
            Claimed::Rejected(rec) => Ok(Cancelled::Rejected(rec)),
            Claimed::Lost | Claimed::Busy(_) => Ok(Cancelled::Lost),
        }
    }

    /// End `rec`, a queued job no monitor took, because its ABORT marker
    /// asks: `cancelled`, the marker's reason in the record, its prompt
    /// archived, never requeued. `stopped_while` says where it was
    /// (`queued`, or `waiting` in the inbox). The caller is the only one
    /// that may end it (the daemon that queued it, or the CLI under the
    /// turn with no daemon running).
    pub fn end_queued(&mut self, rec: &mut JobRecord, stopped_while: &str) -> Result<(), JobError> {
        let id = rec.job_id.clone();
        let mut events = EventLog::open(
            self.layout.root(),
            &self.layout.events(&id),
            self.config.events_for(rec),
        );
        events.append(Op::AbortRequested, json!({"while": stopped_while}));
        let ended = rec.state.stopped_by_request();
        let reason = abort::reason(self.layout, &id, ended);
        rec.abort_requested_at = Some(Timestamp::now());
        let mut finisher = Finisher {
            layout: self.layout,
            config: self.config,
            ledger: self.ledger.as_deref_mut(),
        };
        finisher.finish(rec, &mut events, Ending::new(ended, Some(reason)))
    }

    /// Cancel queued job `id` here, when no daemon runs to see its marker:
    /// write the marker (unless one is there) and end the job. `None` when
    /// it is not this process's to end — a daemon runs (or that cannot be
    /// told), a monitor took the job, or it is no longer queued: then the
    /// marker alone asks, and the caller writes it. The caller holds the
    /// turn.
    pub fn cancel_queued_alone(
        &mut self,
        id: &JobId,
        reason: Option<&str>,
    ) -> Result<Option<(JobRecord, Requested)>, JobError> {
        if daemon_running(self.layout) != Some(false) {
            return Ok(None);
        }
        let mut rec = JobRecord::load_job(self.layout, id)?;
        // Taken: its record says so, or a process holds its monitor lock
        // (a monitor between its lock and its first record line).
        let monitored = rec.monitor_took()
            || !jobwarden_sys::procfs::flock_holders(&self.layout.monitor_lock(id))
                .unwrap_or_default()
                .is_empty();
        if rec.state != JobState::Queued || monitored {
            return Ok(None);
        }
        let requested = abort::write_marker(self.layout, id, reason)?;
        self.end_queued(&mut rec, "queued")?;
        Ok(Some((rec, requested)))
    }
}
