//! Startup reconciliation: distrust the disk, then put every job found in
//! `runs/` back where it belongs before anything new is claimed.
//!
//! - a job whose monitor still runs (proven from `/proc`, see
//!   `recover/liveness.rs`) is adopted and keeps its slot, whatever its
//!   record says: garbage, terminal or missing, the monitor rewrites it at
//!   its next write;
//! - an attempt the ledger holds an end for never runs again: a record
//!   that says otherwise is restored to that end (the ledger is a second
//!   witness) and its prompt goes where an ended job's prompt goes;
//! - a `queued` record that no monitor ever took (no `monitor.lock` file)
//!   goes back on the queue, oldest claim first;
//! - any other non-terminal record lost its monitor: `interrupted`, once
//!   what is left of its process group is proven the job's, killed and
//!   gone (waited for off the daemon's loop: see [`Clearing`]);
//! - a terminal record whose prompt was not yet archived gets the move
//!   finished (a crash between the two steps of `terminal::finish`);
//! - a record that does not parse or fails its checks is moved aside as
//!   `job.json.corrupt-<ms>` and reported, never silently reset;
//! - a `*.running.md` that no live record holds (a crash inside a claim) is
//!   renamed back to `*.prompt.md`, so it is claimed again: never stranded,
//!   unless a live monitor's record is unusable (its prompt is unknown):
//!   then that waits for the next start.

mod liveness;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

pub use liveness::{
    Clearing, LiveMonitors, Monitor, ORPHAN_EXIT_LIMIT, Orphans, clear_orphaned_group,
    live_monitor, monitor_state, monitor_state_of,
};

use crate::clock::Timestamp;
use crate::config::Config;
use crate::error::JobError;
use crate::events::{EventLog, Op};
use crate::fsio::{self, Renamed};
use crate::inbox;
use crate::job::{JobId, JobRecord, JobState};
use crate::layout::{self, InboxEntry, Layout, RUNNING_SUFFIX};
use crate::ledger::Ledger;
use crate::procfs::Proc;
use crate::terminal::{Ending, Finisher};

/// What the daemon must take over.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Queued jobs with their priorities, in claim order.
    pub queued: Vec<(JobId, i32)>,
    /// Jobs whose monitor still runs, with that monitor.
    pub adopted: Vec<(JobId, Proc)>,
    /// Interrupted jobs whose orphaned process group was killed and is
    /// still exiting: ended once it is gone.
    pub clearing: Vec<Clearing>,
}

pub fn reconcile(
    layout: &Layout,
    config: &Config,
    host: &str,
    mut ledger: Option<&mut Ledger>,
) -> Recovered {
    let mut out = Recovered::default();
    let mut queued = Vec::new();
    let mut held: HashSet<PathBuf> = HashSet::new();
    let mut ended: HashMap<PathBuf, JobRecord> = HashMap::new();
    let mut foreign = 0;
    let live = LiveMonitors::scan(layout);
    let ids = run_ids(layout);
    // A live monitor whose run folder is gone altogether (the job removed
    // it; the monitor puts it back at its next write): its prompt is unknown.
    let mut unknown_claims = live.ids().any(|l| {
        JobId::parse(l).is_ok_and(|id| std::fs::symlink_metadata(layout.job_json(&id)).is_err())
    });
    for id in ids {
        let loaded = JobRecord::load_job(layout, &id);
        if let Some(monitor) = live.of(&id, loaded.as_ref().ok()) {
            match &loaded {
                Ok(rec) => {
                    held.insert(layout.running_prompt(&rec.prompt_name()));
                }
                Err(e) => {
                    tracing::warn!(job = %id, pid = monitor.pid, "its record is unusable ({e}), but its monitor runs: adopted, and the monitor writes the record again");
                    unknown_claims = true;
                }
            }
            adopt(layout, config, &id, loaded.ok().as_ref(), monitor);
            out.adopted.push((id, monitor));
            continue;
        }
        let Some(mut rec) = set_aside_if_bad(layout, &id, loaded) else {
            continue;
        };
        if rec.host != host {
            // Another machine's job (a shared inbox): it judges its own.
            foreign += 1;
            held.insert(layout.running_prompt(&rec.prompt_name()));
            continue;
        }
        if !rec.state.is_terminal() {
            witnessed_end(layout, config, ledger.as_deref(), &mut rec);
        }
        if rec.state.is_terminal() {
            keep_newest(&mut ended, layout.running_prompt(&rec.prompt_name()), rec);
            continue;
        }
        held.insert(layout.running_prompt(&rec.prompt_name()));
        let lock_taken = std::fs::symlink_metadata(layout.monitor_lock(&id)).is_ok();
        match rec.state {
            JobState::Queued if !lock_taken => {
                restore_prompt_copy(layout, &rec);
                queued.push((rec.created_at, id, rec.priority));
            }
            _ => {
                let why = "its monitor was gone when the daemon started";
                let ledger = ledger.as_deref_mut();
                out.clearing
                    .extend(interrupt(layout, config, ledger, &mut rec, why, true));
            }
        }
    }
    // A claimed prompt that no live job holds, whose newest job ended: that
    // job's finisher stopped before moving it (its monitor is gone: a live
    // one was adopted above). Complete the finish as the record says.
    for (running, mut rec) in ended {
        if !running.exists() || held.contains(&running) {
            continue;
        }
        if !crate::terminal::resume(layout, config, ledger.as_deref_mut(), &mut rec) {
            // Never requeue a prompt whose job ended but could not be moved.
            held.insert(running);
        }
    }
    if foreign > 0 {
        tracing::warn!(
            jobs = foreign,
            "unfinished jobs recorded by another host were left alone"
        );
    }
    requeue_orphans(layout, &held, unknown_claims);
    queued.sort();
    out.queued = queued.into_iter().map(|(_, id, p)| (id, p)).collect();
    out
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

/// The loaded record; a corrupt one is moved aside and reported.
fn set_aside_if_bad(
    layout: &Layout,
    id: &JobId,
    loaded: Result<JobRecord, JobError>,
) -> Option<JobRecord> {
    match loaded {
        Ok(rec) => Some(rec),
        Err(JobError::BadRecord { path, reason }) => {
            let aside = layout.corrupt_record(id, Timestamp::now().epoch_ms());
            match fsio::rename_noreplace(layout.root(), &path, &aside) {
                Ok(_) => {
                    tracing::error!(job = %id, "corrupt record ({reason}) moved aside to {}", aside.display())
                }
                Err(e) => {
                    tracing::error!(job = %id, "corrupt record ({reason}) could not be moved aside: {e}")
                }
            }
            None
        }
        Err(e) => {
            // A run folder without a record: a claim cut short. Its prompt,
            // if still claimed, is an orphan and goes back to the inbox.
            tracing::warn!(job = %id, "no usable record: {e}");
            None
        }
    }
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
/// `may_wait`. A group still there then means no other attempt starts.
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
    let may_requeue = match clear_orphaned_group(rec) {
        Orphans::Gone => true,
        Orphans::Killed(clearing) if may_wait => return Some(clearing),
        Orphans::Killed(_) => {
            tracing::warn!(job = %rec.job_id, "its process group outlived the wait for it; no other attempt starts");
            false
        }
        Orphans::Unproven => false,
    };
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
        .map_err(|e| crate::error::IoError::new("reading", &held, e))
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
) -> Result<(), crate::error::IoError> {
    let body = layout.prompt_body(&rec.job_id);
    let parsed = std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| crate::front_matter::parse(text).ok());
    match parsed {
        Some(p) if p.has_block() && !body.exists() => {
            fsio::create_new_synced(layout.root(), &body, &bytes[p.body_start..])
        }
        _ => Ok(()),
    }
}

fn keep_newest(ended: &mut HashMap<PathBuf, JobRecord>, running: PathBuf, rec: JobRecord) {
    let newer = |old: &JobRecord| (rec.finished_at, &rec.job_id) > (old.finished_at, &old.job_id);
    if ended.get(&running).is_none_or(newer) {
        ended.insert(running, rec);
    }
}

/// Rename every `*.running.md` that no record holds back to `*.prompt.md`
/// (or, if a newer drop took that name, to a `.recovered-<ms>` sibling).
/// Not while a live monitor's prompt is unknown (`unknown_claims`): it may
/// be one of them.
fn requeue_orphans(layout: &Layout, held: &HashSet<PathBuf>, unknown_claims: bool) {
    let inbox = layout.inbox();
    for found in inbox::scan_suffix(layout.root(), &inbox, RUNNING_SUFFIX) {
        if held.contains(&found.path) {
            continue;
        }
        if unknown_claims {
            tracing::warn!(
                "claimed prompt {} has no readable job, but a live monitor's record is unusable: left claimed until the next start",
                found.path.display()
            );
            continue;
        }
        let Some(prompt) = orphan_prompt(&inbox, &found.path) else {
            continue;
        };
        let back = layout.waiting_prompt(&prompt);
        let result =
            fsio::rename_noreplace(layout.root(), &found.path, &back).and_then(|r| match r {
                Renamed::TargetExists => {
                    let aside = layout.recovered_prompt(&prompt, Timestamp::now().epoch_ms());
                    fsio::rename_noreplace(layout.root(), &found.path, &aside).map(|_| aside)
                }
                _ => Ok(back.clone()),
            });
        match result {
            Ok(to) => tracing::warn!(
                "claimed prompt {} had no job; put back as {}",
                found.path.display(),
                to.display()
            ),
            Err(e) => tracing::error!(
                "orphaned claim {} could not be put back: {e}",
                found.path.display()
            ),
        }
    }
}

/// The prompt key of an orphaned `.running.md`, if its name is valid.
fn orphan_prompt(inbox: &Path, running: &Path) -> Option<layout::PromptName> {
    let as_prompt =
        running.to_str()?.strip_suffix(RUNNING_SUFFIX)?.to_owned() + layout::PROMPT_SUFFIX;
    match layout::classify_inbox_path(inbox, Path::new(&as_prompt)) {
        InboxEntry::Prompt(p) => Some(p),
        _ => None,
    }
}
