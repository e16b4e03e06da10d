//! Startup reconciliation: distrust the disk, then put every job found in
//! `runs/` back where it belongs before anything new is claimed.
//!
//! - a job whose monitor still runs (it holds the job's monitor lock, which
//!   no recycled pid can fake) is adopted and keeps its slot;
//! - a `queued` record that no monitor ever took (no `monitor.lock` file)
//!   goes back on the queue, oldest claim first;
//! - any other non-terminal record lost its monitor: `interrupted`;
//! - a terminal record whose prompt was not yet archived gets the move
//!   finished (a crash between the two steps of `terminal::finish`);
//! - a record that does not parse or fails its checks is moved aside as
//!   `job.json.corrupt-<ms>` and reported, never silently reset;
//! - a `*.running.md` that no live record holds (a crash inside a claim) is
//!   renamed back to `*.prompt.md`, so it is claimed again: never stranded.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use crate::clock::Timestamp;
use crate::config::Config;
use crate::error::JobError;
use crate::events::EventLog;
use crate::fsio::{self, Renamed};
use crate::inbox;
use crate::job::{JobId, JobRecord, JobState};
use crate::layout::{self, InboxEntry, Layout, RUNNING_SUFFIX};
use crate::ledger::Ledger;
use crate::terminal::{Ending, Finisher};

/// What the daemon must take over.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Queued jobs with their priorities, in claim order.
    pub queued: Vec<(JobId, i32)>,
    /// Jobs whose monitor still runs.
    pub adopted: Vec<JobId>,
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
    for id in run_ids(layout) {
        let Some(rec) = load_or_set_aside(layout, &id) else {
            continue;
        };
        if rec.host != host {
            // Another machine's job (a shared inbox): it judges its own.
            foreign += 1;
            held.insert(layout.running_prompt(&rec.prompt_name()));
            continue;
        }
        if rec.state.is_terminal() {
            keep_newest(&mut ended, layout.running_prompt(&rec.prompt_name()), rec);
            continue;
        }
        held.insert(layout.running_prompt(&rec.prompt_name()));
        match monitor_state(layout, &id) {
            Monitor::Alive => {
                let fields = serde_json::json!({"monitor_pid": rec.monitor_pid});
                EventLog::open(&layout.events(&id), config.events_for(&rec))
                    .append("adopted", fields);
                out.adopted.push(id);
            }
            Monitor::NeverStarted if rec.state == JobState::Queued => {
                restore_prompt_copy(layout, &rec);
                queued.push((rec.created_at, id, rec.priority));
            }
            _ => {
                // Read again: its monitor may have ended the job between the
                // first read and our look at its lock, and its last word wins.
                let mut rec = JobRecord::load_job(layout, &id).unwrap_or(rec);
                if rec.state.is_terminal() {
                    let running = layout.running_prompt(&rec.prompt_name());
                    held.remove(&running);
                    keep_newest(&mut ended, running, rec);
                    continue;
                }
                interrupt(
                    layout,
                    config,
                    ledger.as_deref_mut(),
                    &mut rec,
                    "its monitor was gone when the daemon started",
                );
            }
        }
    }
    // A claimed prompt that no live job holds, whose newest job ended: that
    // job's finisher stopped before moving it. A monitor that still runs is
    // finishing it now (its daemon died in between): it is adopted and left
    // to finish. Otherwise the finish is completed as the record says.
    for (running, mut rec) in ended {
        if !running.exists() || held.contains(&running) {
            continue;
        }
        if monitor_state(layout, &rec.job_id) == Monitor::Alive {
            out.adopted.push(rec.job_id.clone());
            held.insert(running);
        } else if !crate::terminal::resume(layout, config, ledger.as_deref_mut(), &mut rec) {
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
    requeue_orphans(layout, &held);
    queued.sort();
    out.queued = queued.into_iter().map(|(_, id, p)| (id, p)).collect();
    out
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

/// Load a record; a corrupt one is moved aside and reported.
fn load_or_set_aside(layout: &Layout, id: &JobId) -> Option<JobRecord> {
    match JobRecord::load_job(layout, id) {
        Ok(rec) => Some(rec),
        Err(JobError::BadRecord { path, reason }) => {
            let aside = layout.corrupt_record(id, Timestamp::now().epoch_ms());
            match fsio::rename_noreplace(&path, &aside) {
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

/// What became of a job's monitor, judged by its lock file: created by the
/// monitor as it starts and locked for its whole life, so no recycled pid
/// can be mistaken for it.
#[derive(Debug, PartialEq, Eq)]
pub enum Monitor {
    /// No monitor ever took the job.
    NeverStarted,
    Alive,
    /// A monitor took the job and is gone.
    Gone,
}

pub fn monitor_state(layout: &Layout, id: &JobId) -> Monitor {
    let lock = layout.monitor_lock(id);
    if std::fs::symlink_metadata(&lock).is_err() {
        return Monitor::NeverStarted;
    }
    // Taking the lock to test it releases it at once.
    match fsio::try_lock(&lock) {
        Ok(None) => Monitor::Alive,
        _ => Monitor::Gone,
    }
}

/// End a job whose monitor is gone as `interrupted` (requeued at once,
/// up to `max_interrupts` in a row).
pub fn interrupt(
    layout: &Layout,
    config: &Config,
    ledger: Option<&mut Ledger>,
    rec: &mut JobRecord,
    why: &str,
) {
    tracing::warn!(job = %rec.job_id, "{why}");
    let mut events = EventLog::open(&layout.events(&rec.job_id), config.events_for(rec));
    let mut finisher = Finisher {
        layout,
        config,
        ledger,
    };
    let mut ending = Ending::new(JobState::Interrupted, Some(why.to_owned()));
    ending.may_requeue = clear_orphaned_group(rec);
    if let Err(e) = finisher.finish(rec, &mut events, ending) {
        tracing::error!(job = %rec.job_id, "{e}");
    }
}

/// Kill what is left of a dead monitor's job. The leader got SIGKILL with
/// its monitor (parent-death signal), but its group may live on. While any
/// member lives, the kernel does not hand the group's id to anyone else, so
/// with the leader gone the members are ours. Returns false if something
/// may still run that cannot be told apart from a stranger (the leader's
/// pid is in use): then no new attempt may start.
fn clear_orphaned_group(rec: &JobRecord) -> bool {
    use nix::sys::signal::{Signal, killpg};
    use nix::unistd::Pid;
    let Some(pgid) = rec.pgid.filter(|&p| p > 1).map(Pid::from_raw) else {
        return true;
    };
    if killpg(pgid, None).is_err() {
        return true;
    }
    if crate::procfs::is_running(pgid.as_raw()) {
        tracing::warn!(job = %rec.job_id, pgid = pgid.as_raw(), "its process group may still run; not starting another attempt");
        return false;
    }
    tracing::warn!(job = %rec.job_id, pgid = pgid.as_raw(), "killing what is left of its process group");
    killpg(pgid, Signal::SIGKILL).is_ok() || killpg(pgid, None).is_err()
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
            fsio::create_new_synced(&copy, &bytes)?;
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
            fsio::create_new_synced(&body, &bytes[p.body_start..])
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
fn requeue_orphans(layout: &Layout, held: &HashSet<PathBuf>) {
    let inbox = layout.inbox();
    for found in inbox::scan_suffix(&inbox, RUNNING_SUFFIX) {
        if held.contains(&found.path) {
            continue;
        }
        let Some(prompt) = orphan_prompt(&inbox, &found.path) else {
            continue;
        };
        let back = layout.waiting_prompt(&prompt);
        let result = fsio::rename_noreplace(&found.path, &back).and_then(|r| match r {
            Renamed::TargetExists => {
                let aside = layout.recovered_prompt(&prompt, Timestamp::now().epoch_ms());
                fsio::rename_noreplace(&found.path, &aside).map(|_| aside)
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
