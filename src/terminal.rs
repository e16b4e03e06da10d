//! Ending a job: the terminal transition and the archive of its prompt, in
//! the one order that every crash point can recover from:
//!
//! 1. `job.json` is written in its terminal state, already naming the
//!    archive path (fsynced). A crash here leaves a terminal record whose
//!    prompt is still `*.running.md`: recovery completes the move.
//! 2. The prompt is renamed `*.running.md` → `archive/<state>/…` without
//!    ever replacing a file (fsynced directories).
//! 3. The `archived` event (fail-soft).
//!
//! Used by the monitor (normal ends) and the daemon (jobs that end before a
//! monitor starts: rejected, aborted while queued, interrupted).

use serde_json::json;

use crate::error::JobError;
use crate::events::EventLog;
use crate::fsio::{self, Renamed};
use crate::job::{JobRecord, JobState};
use crate::layout::Layout;

/// Move `rec` to terminal `to` and archive its prompt from `inbox_path`.
pub fn finish(
    layout: &Layout,
    rec: &mut JobRecord,
    events: &mut EventLog,
    to: JobState,
    reason: Option<String>,
) -> Result<(), JobError> {
    let from = rec.state;
    let held = rec.inbox_path.as_deref().map(|p| layout.resolve(p));
    let archive = layout.archived_prompt(to, &rec.prompt_name(), &rec.job_id);
    let archive_rel = layout.relative(&archive).to_string_lossy().into_owned();
    rec.archive_path = Some(archive_rel.clone());
    rec.inbox_path = Some(archive_rel.clone());
    rec.transition(layout, to, reason)?;
    events.append("state", json!({"from": from, "to": to}));
    let Some(held) = held.filter(|h| *h != archive) else {
        events.append("archived", json!({"path": archive_rel}));
        return Ok(());
    };
    archive_prompt(layout, rec, events, &held, &archive)
}

fn archive_prompt(
    layout: &Layout,
    rec: &mut JobRecord,
    events: &mut EventLog,
    held: &std::path::Path,
    archive: &std::path::Path,
) -> Result<(), JobError> {
    if let Some(dir) = archive.parent() {
        fsio::create_dirs(dir)?;
    }
    let archive_rel = rec.archive_path.clone();
    match fsio::rename_noreplace(held, archive)? {
        Renamed::Done => {
            events.append("archived", json!({"path": archive_rel}));
            Ok(())
        }
        outcome => {
            // The record named an archive that did not happen: say so in it.
            let why = match outcome {
                Renamed::SourceGone => "the prompt file was gone at archive time",
                _ => "an archive file of that name already existed",
            };
            tracing::warn!(job = %rec.job_id, "not archived: {why} ({})", held.display());
            rec.archive_path = None;
            rec.inbox_path = None;
            rec.extra.insert("archive_error".into(), json!(why));
            rec.save(layout)?;
            events.append("archive_failed", json!({"reason": why}));
            Ok(())
        }
    }
}
