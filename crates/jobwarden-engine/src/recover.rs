//! Start-up reconciliation: distrust the disk, and put every job back
//! where it belongs. Each job found is judged by [`Pass::job`]
//! (`recover/pass.rs`), then the claimed prompts by [`Pass::settle_claims`]:
//!
//! - a job whose monitor still runs (proven from `/proc`, see
//!   `recover/liveness.rs`) is adopted and keeps its slot, whatever its
//!   record says: garbage, terminal or missing, the monitor rewrites it at
//!   its next write;
//! - an attempt the ledger holds an end for never runs again: a record
//!   that says otherwise is restored to that end (the ledger is a second
//!   witness) and its prompt goes where an ended job's prompt goes;
//! - a `queued` record that no monitor ever took (no `monitor_pid`: a
//!   monitor's first record line names it before anything runs) goes
//!   back on the queue, oldest claim first;
//! - a job whose main command was submitted to Slurm (`running`, with
//!   `slurm` in its record) lost only its monitor: the job goes on in
//!   Slurm, and a new monitor follows it;
//! - any other non-terminal record lost its monitor: `interrupted`, once
//!   what is left of its process group is proven the job's, killed and
//!   gone (waited for off the daemon's loop: see [`Clearing`]);
//! - a terminal record whose prompt was not yet archived gets the move
//!   finished (a crash between the two steps of `terminal::finish`), and
//!   its missing ledger row backfilled;
//! - a record that does not parse or fails its checks is moved aside as
//!   `job.json.corrupt-<ms>` and reported, never silently reset;
//! - a `*.running.md` that no live record holds (a crash inside a claim) is
//!   renamed back to `*.prompt.md`, so it is claimed again: never stranded,
//!   unless a live monitor's record is unusable (its prompt is unknown):
//!   then that waits for the next start.
//!
//! # Start-up order: what is read before the first claim
//!
//! A start must not grow with the finished jobs on disk, so it is split:
//!
//! 1. Before anything is claimed, under the turn at `claim.lock`
//!    ([`reconcile_live`]): the jobs the job index holds unended, and the
//!    live monitors (one pass over `/proc`); only their run folders are
//!    read. Every job that may still run, wait or hold a slot is among
//!    them, by construction: a claim writes the job's index row before
//!    its run folder (`claim.rs`), and an index row says a job ended only
//!    once its ledger row is written (`terminal.rs`), so a row that lags
//!    its record still says "not ended". What this step does to a job is
//!    right whatever else is on disk: it claims nothing and moves only
//!    the prompts of the records it read. It leaves alone what needs every
//!    record to be judged: a claimed prompt no record it read holds may
//!    still be held by a job the index misses.
//! 2. The first claims: the inbox is scanned and watched, jobs start.
//! 3. The start-up check ([`sweep`], `daemon/startup_check.rs`): the full
//!    listing of `runs/`, on a thread of its own at the lowest priority, a
//!    second after the first claims, catches the rest — a
//!    run folder whose index row is missing or stale (a failed index
//!    write, a ledger replaced), an ended job without its ledger row, an
//!    ended job whose prompt was not moved, a corrupt record, a claimed
//!    prompt no record holds. The thread reads, and writes only the index
//!    (a cache); what it finds is acted on by the daemon's loop, under the
//!    turn, for the jobs the loop does not own. The loop owns every job it
//!    queued, started, adopted or is ending, and every prompt it claimed;
//!    the check's listing cannot know those, the loop does. A claimed
//!    prompt is taken for an orphan only if it was there when the check
//!    began (a later one is a claim of the loop's) and no record of the
//!    listing, of step 1 or of the loop's claims holds it.
//!
//! Without a usable index (a damaged ledger) step 1 is [`reconcile`]: every
//! run folder and every claimed prompt, before the first claim, as before;
//! so it is, after a backfill that rebuilds it, for an index that holds no
//! job while `runs/` holds some (a ledger lost and made afresh).

mod liveness;
mod pass;
pub mod sweep;

use std::collections::{BTreeSet, HashSet};
use std::path::PathBuf;

pub use liveness::{
    Clearing, LiveMonitors, Monitor, ORPHAN_EXIT_LIMIT, Orphans, clear_orphaned_group,
    live_monitor, monitor_state, monitor_state_of,
};
pub use pass::Pass;

use crate::failure::JobError;
use crate::inbox;
use crate::terminal::{Ending, Finisher};
use jobwarden_ledger::{IndexedJob, Ledger, LedgerError};
use jobwarden_model::config::Config;
use jobwarden_model::events::{EventLog, Op};
use jobwarden_model::job::{JobId, JobRecord, JobState};
use jobwarden_model::layout::{Layout, RUNNING_SUFFIX};
use jobwarden_sys::clock::Timestamp;
use jobwarden_sys::fsio;
use jobwarden_sys::procfs::Proc;

/// What the daemon must take over.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Queued jobs with their priorities, in claim order.
    pub queued: Vec<(JobId, i32)>,
    /// Jobs whose monitor still runs, with that monitor.
    pub adopted: Vec<(JobId, Proc)>,
    /// Jobs whose main command runs in Slurm and whose monitor is gone:
    /// the job goes on there, and a new monitor follows it.
    pub reattach: Vec<JobId>,
    /// Interrupted jobs whose orphaned process group was killed and is
    /// still exiting: ended once it is gone.
    pub clearing: Vec<Clearing>,
    /// Claimed prompts (`*.running.md`) that the records read hold.
    pub held: HashSet<PathBuf>,
    /// A live monitor's record was unusable: its claimed prompt is unknown,
    /// so none is taken for an orphan until the next start.
    pub unknown_claims: bool,
}

/// The start-up reconciliation: every job that may be live, found without
/// listing `runs/` — the jobs the index holds unended, and those whose
/// monitor runs (one pass over `/proc`) — judged as [`Pass::job`] says.
/// An unended row whose run folder never appeared (a claim cut short
/// between its row and its folder), or holds no record, is dropped from
/// the index. Ended records among them (a stale row) get their missing
/// ledger row back and their row refreshed. What only the full listing can
/// tell (claimed prompts to finish or put back, records the index does not
/// know) is left to the start-up check ([`sweep`]).
pub fn reconcile_live(
    layout: &Layout,
    config: &Config,
    host: &str,
    ledger: &mut Ledger,
) -> Result<Recovered, LedgerError> {
    let live = LiveMonitors::scan(layout);
    let mut ids: BTreeSet<JobId> = ledger
        .unended_job_ids()?
        .iter()
        .filter_map(|id| JobId::parse(id).ok())
        .collect();
    let has_folder = |id: &JobId| std::fs::symlink_metadata(layout.run_dir(id)).is_ok();
    ids.extend(live_ids(&live).filter(has_folder));
    let mut loaded = Vec::with_capacity(ids.len());
    let mut gone = Vec::new();
    for id in ids {
        let (rec, monitor) = load(layout, &id, &live);
        if monitor.is_none() && is_missing(&rec) {
            tracing::debug!(job = %id, "its index row names no record: dropped");
            gone.push(id.to_string());
            continue;
        }
        if let (Ok(r), None) = (&rec, monitor) {
            refresh_ended(layout, ledger, r);
        }
        loaded.push((id, rec, monitor));
    }
    if let Err(e) = ledger.unindex_jobs(&gone) {
        tracing::warn!("dropping index rows of jobs that never were: {e}");
    }
    let mut pass = Pass::new(layout, config, host, Some(ledger));
    pass.unknown_claims = live_without_folder(layout, &live);
    for (id, rec, monitor) in loaded {
        pass.job(id, rec, monitor);
    }
    Ok(pass.finish())
}

/// The full reconciliation: every job in `runs/`, then every claimed
/// prompt. What a start without a usable job index does, before claiming.
pub fn reconcile(
    layout: &Layout,
    config: &Config,
    host: &str,
    ledger: Option<&mut Ledger>,
) -> Recovered {
    let live = LiveMonitors::scan(layout);
    let mut pass = Pass::new(layout, config, host, ledger);
    pass.unknown_claims = live_without_folder(layout, &live);
    for id in run_ids(layout) {
        let (loaded, monitor) = load(layout, &id, &live);
        pass.job(id, loaded, monitor);
    }
    pass.settle_claims(claimed_prompts(layout, config));
    pass.finish()
}

/// Every `*.running.md` in the inbox now that this host may judge: in an
/// inbox shared by several hosts, those its own claims hold.
pub fn claimed_prompts(layout: &Layout, config: &Config) -> Vec<PathBuf> {
    let claimed = inbox::scan_suffix(layout.root(), &layout.inbox(), RUNNING_SUFFIX)
        .into_iter()
        .map(|f| f.path)
        .collect();
    crate::shared_inbox::own_claims(layout, config, claimed)
}

/// Job `id`'s record, and its monitor if one lives. A `job.json` behind
/// the job's journal (a power cut took its last rewrite, which is never
/// fsynced on its own) is written again from the journal first, unless a
/// live monitor, its one writer, holds the job.
fn load(
    layout: &Layout,
    id: &JobId,
    live: &LiveMonitors,
) -> (Result<JobRecord, JobError>, Option<Proc>) {
    let loaded = JobRecord::load_job_view(layout, id);
    let monitor = live.of(id, loaded.as_ref().ok().map(|(rec, _)| rec));
    let rec = loaded.map_err(JobError::from).map(|(mut rec, behind)| {
        if behind && monitor.is_none() {
            write_view_again(layout, &mut rec);
        }
        rec
    });
    (rec, monitor)
}

/// Write `rec`, the journal's copy of a record whose `job.json` is behind
/// it, as `job.json` again; false when it could not be written. The
/// caller guarantees no monitor writes it.
pub fn write_view_again(layout: &Layout, rec: &mut JobRecord) -> bool {
    match rec.save_unsynced(layout) {
        Ok(()) => {
            tracing::warn!(job = %rec.job_id, "job.json was behind its journal; written again from events.jsonl");
            true
        }
        Err(e) => {
            tracing::warn!(job = %rec.job_id, "writing job.json again from its journal: {e}");
            false
        }
    }
}

fn live_ids(live: &LiveMonitors) -> impl Iterator<Item = JobId> + '_ {
    live.ids().filter_map(|l| JobId::parse(l).ok())
}

/// Does a live monitor's run folder lack its record altogether (the job
/// removed it; the monitor puts it back at its next write)? Then its
/// prompt is unknown.
fn live_without_folder(layout: &Layout, live: &LiveMonitors) -> bool {
    live_ids(live).any(|id| !layout.has_record(&id))
}

/// Is `loaded` a record that is not there at all (as opposed to one that
/// cannot be read or trusted)?
fn is_missing(loaded: &Result<JobRecord, JobError>) -> bool {
    matches!(loaded, Err(JobError::Io(e)) if e.source.kind() == std::io::ErrorKind::NotFound)
}

/// A record the index holds unended: refresh its row; if it has ended (its
/// monitor died before the row was written), its ledger row comes back now,
/// before anything is claimed (cooldowns, attempt numbers).
fn refresh_ended(layout: &Layout, ledger: &mut Ledger, rec: &JobRecord) {
    if rec.state.is_terminal() {
        if let Err(e) = jobwarden_ledger::backfill::ensure_row(layout, ledger, rec) {
            tracing::warn!(job = %rec.job_id, "{e}; the row will be backfilled later");
        }
    }
    if let Err(e) = ledger.index_jobs(&[IndexedJob::from_record(rec)]) {
        tracing::warn!(job = %rec.job_id, "{e}; its index row is refreshed later");
    }
}

/// Note in its events that a restarted daemon took over job `id`'s slot.
fn adopt(layout: &Layout, config: &Config, id: &JobId, rec: Option<&JobRecord>, monitor: Proc) {
    let enabled = rec.is_none_or(|r| config.events_for(r));
    let fields = serde_json::json!({"monitor_pid": monitor.pid});
    EventLog::open(layout.root(), &layout.events(id), enabled).append(Op::Adopted, fields);
}

fn run_ids(layout: &Layout) -> Vec<JobId> {
    layout.job_ids().unwrap_or_else(|e| {
        tracing::error!(
            "reading {}: {e}; no job can be recovered",
            layout.runs().display()
        );
        Vec::new()
    })
}

/// The ledger is a second witness: an attempt it holds an end for has
/// ended, whatever its record says now (edited back, written over by the
/// job). Restore the record to that end, its prompt bound for the archive;
/// true if it was restored. The caller then treats it as any ended job.
pub fn witnessed_end(
    layout: &Layout,
    config: &Config,
    ledger: Option<&Ledger>,
    rec: &mut JobRecord,
) -> bool {
    let Some(ledger) = ledger else {
        return false;
    };
    let row = match ledger.ended(rec.job_id.as_str()) {
        Ok(Some(row)) => row,
        Ok(None) => return false,
        Err(e) => {
            tracing::warn!(job = %rec.job_id, "{e}; its record is trusted as it is");
            return false;
        }
    };
    let to = row.outcome.state();
    tracing::warn!(job = %rec.job_id, record = %rec.state, ledger = %row.outcome, "its record says it has not ended, but the ledger holds its end: it is not run again; its record is restored to {to}");
    rec.outcome = Some(row.outcome.as_str().to_owned());
    rec.exit_code = row.exit_code;
    rec.signal = row.signal;
    rec.failure_stage = row.failure_stage;
    rec.result_ref = row.result_ref;
    crate::terminal::route(layout, rec, to, false);
    let finished =
        Timestamp::from(std::time::UNIX_EPOCH + std::time::Duration::from_millis(row.finished_at));
    let mut events = EventLog::open(
        layout.root(),
        &layout.events(&rec.job_id),
        config.events_for(rec),
    );
    match rec.restore_end(layout, &mut events, to, row.error_message, finished) {
        Ok(()) => true,
        Err(e) => {
            tracing::error!(job = %rec.job_id, "restoring its record: {e}");
            // Whatever is on disk, this attempt must not start again.
            rec.state = to;
            true
        }
    }
}

/// End a job whose monitor is gone as `interrupted` (requeued at once,
/// up to `max_interrupts` in a row), unless the ledger already holds its
/// end. If its orphaned process group was killed and is still exiting, and
/// `may_wait`, nothing is ended yet: the returned [`Clearing`] is waited
/// for (off the daemon's loop), then this is called again without
/// `may_wait`. A group still there then means no other attempt starts. A
/// live monitor of the job found after all (its record or lock file
/// forged) ends nothing: the job stays its monitor's.
pub fn interrupt(
    layout: &Layout,
    config: &Config,
    ledger: Option<&mut Ledger>,
    rec: &mut JobRecord,
    why: &str,
    may_wait: bool,
) -> Option<Clearing> {
    let mut ledger = ledger;
    if witnessed_end(layout, config, ledger.as_deref(), rec) {
        crate::terminal::resume(layout, config, ledger.as_deref_mut(), rec);
        return None;
    }
    let may_requeue = match clear_orphaned_group(layout, rec) {
        Orphans::Gone => true,
        Orphans::Killed(clearing) | Orphans::Exiting(clearing) if may_wait => {
            return Some(clearing);
        }
        Orphans::Killed(_) | Orphans::Exiting(_) => {
            tracing::warn!(job = %rec.job_id, "its process group outlived the wait for it; no other attempt starts");
            false
        }
        Orphans::Unproven => false,
        // Its monitor writes its end; the caller sees it not ended yet.
        Orphans::MonitorAlive(_) => return None,
    };
    // A Slurm job may still run in Slurm whatever became of its monitor:
    // no other attempt starts beside it.
    let may_requeue = may_requeue && rec.slurm.is_none();
    tracing::warn!(job = %rec.job_id, "{why}");
    let mut events = EventLog::open(
        layout.root(),
        &layout.events(&rec.job_id),
        config.events_for(rec),
    );
    let mut finisher = Finisher {
        layout,
        config,
        ledger,
    };
    let mut ending = Ending::new(JobState::Interrupted, Some(why.to_owned()));
    ending.may_requeue = may_requeue;
    if let Err(e) = finisher.finish(rec, &mut events, ending) {
        tracing::error!(job = %rec.job_id, "{e}");
    }
    None
}

/// A queued job whose `prompt.md` is missing (lost with a crash, or
/// removed by hand) gets it back from the claimed prompt, byte for byte, so
/// that it runs what was claimed instead of failing at start; its `body.md`
/// too, if the prompt has front matter and the body is missing as well.
fn restore_prompt_copy(layout: &Layout, rec: &JobRecord) {
    let copy = layout.prompt_copy(&rec.job_id);
    let held = layout.running_prompt(&rec.prompt_name());
    if copy.exists() || !held.exists() {
        return;
    }
    let restored = std::fs::read(&held)
        .map_err(|e| jobwarden_sys::error::IoError::new("reading", &held, e))
        .and_then(|bytes| {
            fsio::create_new_synced(layout.root(), &copy, &bytes)?;
            restore_body(layout, rec, &bytes)
        });
    match restored {
        Ok(()) => {
            tracing::warn!(job = %rec.job_id, "its prompt copy was missing; restored from {}", held.display())
        }
        Err(e) => tracing::error!(job = %rec.job_id, "restoring its prompt copy: {e}"),
    }
}

/// Write the job's missing `body.md` from the claimed `bytes`, if they
/// start with front matter.
fn restore_body(
    layout: &Layout,
    rec: &JobRecord,
    bytes: &[u8],
) -> Result<(), jobwarden_sys::error::IoError> {
    let body = layout.prompt_body(&rec.job_id);
    let parsed = std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| jobwarden_model::front_matter::parse(text).ok());
    match parsed {
        Some(p) if p.has_block() && !body.exists() => {
            fsio::create_new_synced(layout.root(), &body, &bytes[p.body_start..])
        }
        _ => Ok(()),
    }
}

/// Is `rec`'s missing ledger row about to be written by someone else: its
/// monitor, still alive, or the running daemon its monitor handed the end
/// over to (the record is terminal and the prompt still claimed; see
/// `terminal.rs`)? A `history repair` running beside the daemon must not
/// take the row from them: theirs carries the output tails and paths that
/// a backfilled one lacks. (The row is backfilled later if both die first.)
/// The backfill's question ([`jobwarden_ledger::backfill::run`]).
pub fn being_finished(layout: &Layout, rec: &JobRecord) -> bool {
    if matches!(monitor_state(layout, &rec.job_id), Monitor::Alive(_)) {
        return true;
    }
    let claimed = std::fs::symlink_metadata(layout.running_prompt(&rec.prompt_name())).is_ok();
    claimed
        && matches!(
            jobwarden_sys::procfs::flock_holder(&layout.daemon_lock()),
            Ok(Some(_))
        )
}

pub use crate::inbox::put_back;

/// Rename every one of `claimed` (`*.running.md` paths) that no record
/// holds back to `*.prompt.md` (or, if a newer drop took that name, to a
/// `.recovered-<ms>` sibling); one gone meanwhile is skipped. Not while a
/// live monitor's prompt is unknown (`unknown_claims`): it may be one of
/// them.
fn requeue_orphans(
    layout: &Layout,
    claimed: Vec<PathBuf>,
    held: &HashSet<PathBuf>,
    unknown_claims: bool,
) {
    for path in claimed {
        if held.contains(&path) || std::fs::symlink_metadata(&path).is_err() {
            continue;
        }
        if unknown_claims {
            tracing::warn!(
                "claimed prompt {} has no readable job, but a live monitor's record is unusable: left claimed until the next start",
                path.display()
            );
            continue;
        }
        let Some(prompt) = layout.prompt_of_claimed(&path) else {
            continue;
        };
        match put_back(layout, &prompt, &path) {
            Ok(None) => {}
            Ok(Some(to)) => tracing::warn!(
                "claimed prompt {} had no job; put back as {}",
                path.display(),
                to.display()
            ),
            Err(e) => tracing::error!(
                "orphaned claim {} could not be put back: {e}",
                path.display()
            ),
        }
    }
}
