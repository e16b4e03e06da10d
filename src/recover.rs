//! Startup reconciliation: distrust the disk, then put every job found in
//! `runs/` back where it belongs before anything new is claimed.
//!
//! - `queued` records go back on the queue, oldest claim first;
//! - jobs whose monitor still runs (it holds the job's monitor lock, which
//!   no recycled pid can fake) are adopted and keep their slot;
//! - non-terminal jobs whose monitor is gone become `interrupted`;
//! - terminal records whose prompt was not yet archived get the move
//!   finished (a crash between the two steps of `terminal::finish`).
//!
//! Unreadable records are reported and left alone.

use serde_json::json;

use crate::config::Config;
use crate::events::EventLog;
use crate::fsio::{self, Renamed};
use crate::job::{JobId, JobRecord, JobState};
use crate::layout::Layout;
use crate::terminal;

/// What the daemon must take over.
#[derive(Debug, Default)]
pub struct Recovered {
    pub queued: Vec<JobId>,
    /// Jobs whose monitor still runs.
    pub adopted: Vec<JobId>,
}

pub fn reconcile(layout: &Layout, config: &Config, host: &str) -> Recovered {
    let mut out = Recovered::default();
    let mut queued = Vec::new();
    for id in run_ids(layout) {
        let mut rec = match JobRecord::load_job(layout, &id) {
            Ok(rec) => rec,
            Err(e) => {
                tracing::warn!("skipping at start: {e}");
                continue;
            }
        };
        if rec.host != host {
            continue;
        }
        if rec.state.is_terminal() {
            finish_archive(layout, &rec);
        } else if monitor_alive(layout, &id) {
            EventLog::open(&layout.events(&id), config.events)
                .append("adopted", json!({"monitor_pid": rec.monitor_pid}));
            out.adopted.push(id);
        } else if rec.state == JobState::Queued {
            // Never started, or its monitor died before taking the lock.
            queued.push((rec.created_at, id));
        } else {
            interrupt(layout, config, &mut rec);
        }
    }
    queued.sort();
    out.queued = queued.into_iter().map(|(_, id)| id).collect();
    out
}

fn run_ids(layout: &Layout) -> Vec<JobId> {
    let Ok(entries) = std::fs::read_dir(layout.runs()) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|n| JobId::parse(n).ok()))
        .collect()
}

/// A job's monitor is alive while it holds the job's monitor lock. Taking
/// the lock to test it releases it at once.
pub fn monitor_alive(layout: &Layout, id: &JobId) -> bool {
    matches!(fsio::try_lock(&layout.monitor_lock(id)), Ok(None))
}

fn interrupt(layout: &Layout, config: &Config, rec: &mut JobRecord) {
    let reason = "its monitor was gone when the daemon started".to_owned();
    tracing::warn!(job = %rec.job_id, "{reason}");
    let mut events = EventLog::open(&layout.events(&rec.job_id), config.events);
    if let Err(e) = terminal::finish(
        layout,
        rec,
        &mut events,
        JobState::Interrupted,
        Some(reason),
    ) {
        tracing::error!(job = %rec.job_id, "{e}");
    }
}

/// A terminal record naming an archive path that does not exist while the
/// claimed prompt still does: finish the interrupted move.
fn finish_archive(layout: &Layout, rec: &JobRecord) {
    let Some(archive) = rec.archive_path.as_ref().map(|p| layout.root().join(p)) else {
        return;
    };
    if archive.exists() {
        return;
    }
    let held = layout.running_prompt(&rec.prompt_name());
    if !held.exists() {
        return;
    }
    let moved = archive
        .parent()
        .map_or(Ok(()), fsio::create_dirs)
        .and_then(|()| fsio::rename_noreplace(&held, &archive));
    match moved {
        Ok(Renamed::Done) => tracing::info!(job = %rec.job_id, "finished archiving its prompt"),
        Ok(other) => tracing::warn!(job = %rec.job_id, "archive not finished: {other:?}"),
        Err(e) => tracing::error!(job = %rec.job_id, "{e}"),
    }
}
