//! Where an ended job's prompt is: the move of its claimed file to where
//! its record says (never replacing a file), and what the record says
//! when the move cannot be made: a folder refused, the file already moved,
//! or the file missing (the job removed it). A record names an
//! `archive_path` only while the file is there.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::{rel, route};
use crate::failure::JobError;
use jobwarden_model::config::Config;
use jobwarden_model::events::{EventLog, Op};
use jobwarden_model::job::JobRecord;
use jobwarden_model::job::{already_placed, holds_claimed_bytes};
use jobwarden_model::layout::Layout;
use jobwarden_sys::fsio::{self, Renamed};

/// Move an ended job's claimed prompt `held` to `dest`, where its record
/// says it goes, never replacing a file. Every step may be run again after
/// a crash or by a second finisher, and ends with the record naming where
/// the prompt really is:
///
/// - a requeue whose name a new drop took: archived instead;
/// - an archive name taken by a file that is not this job's (a leftover,
///   or planted): the next free `<name>.<job_id>.<n>.md`;
/// - the prompt already moved (a finish that was cut short after its move,
///   or another finisher that went first): found at `dest` or elsewhere in
///   the archive by its digest, and recorded there.
pub(super) fn place(
    layout: &Layout,
    rec: &mut JobRecord,
    events: &mut EventLog,
    held: &Path,
    dest: &Path,
) -> Result<(), JobError> {
    if held == layout.running_prompt(&rec.prompt_name()) {
        if let Some(why) = crate::shared_inbox::taken(layout, rec) {
            return not_moved(layout, rec, events, held, &why);
        }
    }
    let root = layout.root();
    let moved = dest
        .parent()
        .map_or(Ok(()), |dir| fsio::create_dirs(root, dir))
        .and_then(|()| fsio::rename_noreplace(root, held, dest));
    let moved = match moved {
        Err(e) if fsio::is_refusal(&e) => return refused(layout, rec, events, held, &e),
        other => other?,
    };
    let requeue = rec.archive_path.is_none();
    match moved {
        Renamed::Done => {
            crate::shared_inbox::release(layout, rec);
            announce(rec, events);
            Ok(())
        }
        Renamed::TargetExists => {
            // A requeue whose name a new drop took: that drop is the next
            // run, and this attempt's prompt is archived. An archive name
            // that is taken: the next free one.
            let next = if requeue {
                route(layout, rec, rec.state, false)
            } else {
                free_archive_name(layout, rec, dest)
            };
            rec.save(layout)?;
            place(layout, rec, events, held, &next)
        }
        Renamed::SourceGone => match already_placed(layout, rec, dest) {
            Some(found) => {
                if found != dest {
                    record_place(layout, rec, &found);
                    rec.save(layout)?;
                }
                tracing::info!(job = %rec.job_id, "its prompt was already moved to {}", found.display());
                crate::shared_inbox::release(layout, rec);
                announce(rec, events);
                Ok(())
            }
            None => missing(layout, rec, events, held),
        },
    }
}

/// An ended job whose claimed prompt `held` is gone: true once the record
/// says where the prompt is. A record says `archived` only while its
/// archive file is there: a prompt moved already (by its finisher) is
/// found by its digest and recorded where it is; one the job removed (or
/// an inbox moved away) is recorded missing, with an event and a warning.
/// A requeued prompt is the inbox's again and is left alone.
pub(super) fn confirm_placed(
    layout: &Layout,
    config: &Config,
    rec: &mut JobRecord,
    held: &Path,
    dest: &Path,
) -> bool {
    if rec.archive_path.is_none() || holds_claimed_bytes(layout, rec, dest) {
        return true;
    }
    let mut events = EventLog::open(
        layout.root(),
        &layout.events(&rec.job_id),
        config.events_for(rec),
    );
    let saved = match already_placed(layout, rec, dest) {
        Some(found) => {
            record_place(layout, rec, &found);
            rec.save(layout).map_err(JobError::from)
        }
        None => missing(layout, rec, &mut events, held),
    };
    if let Err(e) = saved {
        tracing::error!(job = %rec.job_id, "recording where its prompt is: {e}");
    }
    true
}

/// The claimed prompt `held` was gone when its job ended, and is nowhere
/// in the archive: the record says so (`disposition` `missing`, no
/// `archive_path`), with an `archive_failed` event and a warning.
fn missing(
    layout: &Layout,
    rec: &mut JobRecord,
    events: &mut EventLog,
    held: &Path,
) -> Result<(), JobError> {
    rec.disposition = Some(jobwarden_model::job::DISPOSITION_MISSING.to_owned());
    let why = "the prompt file was missing when the job ended (removed or moved away while the job ran); nothing was archived";
    not_moved(layout, rec, events, held, why)
}

/// The record of an ending job named as its claimed prompt `named`, a
/// file no claim of its prompt makes (see `claimed_place`): nothing is
/// moved or put back, and the record says its prompt is `missing`, why in
/// `archive_error` (set before its terminal write, which carries it).
pub(super) fn mark_not_its_own(layout: &Layout, rec: &mut JobRecord, named: &Path) {
    let why = format!(
        "its record named {} as the prompt it claimed, a file no claim of {} makes; nothing was moved",
        rel(layout, named),
        rec.prompt_name()
    );
    rec.disposition = Some(jobwarden_model::job::DISPOSITION_MISSING.to_owned());
    rec.archive_path = None;
    rec.inbox_path = None;
    rec.extra.insert("archive_error".into(), json!(why));
}

/// Say, once its terminal record is written, what [`mark_not_its_own`]
/// found: a warning and an `archive_failed` event.
pub(super) fn told_not_its_own(rec: &JobRecord, events: &mut EventLog) {
    let why = rec.extra.get("archive_error").cloned().unwrap_or_default();
    tracing::warn!(job = %rec.job_id, "prompt not moved: {}", why.as_str().unwrap_or(""));
    events.append(Op::ArchiveFailed, json!({"reason": why}));
}

fn announce(rec: &JobRecord, events: &mut EventLog) {
    let op = if rec.archive_path.is_none() {
        Op::Requeued
    } else {
        Op::Archived
    };
    events.append(op, json!({"path": rec.inbox_path, "attempt": rec.attempt}));
}

/// The first archive name of `rec`'s prompt after `taken` that no file
/// holds yet (a rename that still finds one taken simply asks again).
pub(super) fn free_archive_name(layout: &Layout, rec: &mut JobRecord, taken: &Path) -> PathBuf {
    tracing::warn!(job = %rec.job_id, "{} already exists and is not this job's prompt; archiving under another name", taken.display());
    let prompt = rec.prompt_name();
    let free = (1..)
        .map(|n| layout.archived_prompt_alt(rec.state, &prompt, &rec.job_id, n))
        .find(|p| std::fs::symlink_metadata(p).is_err() && p.as_path() != taken)
        .unwrap_or_else(|| taken.to_path_buf());
    record_place(layout, rec, &free);
    free
}

/// Say in the record that the prompt is archived at `path`.
pub(super) fn record_place(layout: &Layout, rec: &mut JobRecord, path: &Path) {
    let rel = rel(layout, path);
    rec.disposition = Some("archived".to_owned());
    rec.archive_path = Some(rel.clone());
    rec.inbox_path = Some(rel);
    rec.extra.remove("archive_error");
}

/// The destination's folder is not a folder we may write through (a
/// symlink, a FIFO): the prompt stays where it is, held by this record,
/// never moved through the link and never lost; the record says why.
fn refused(
    layout: &Layout,
    rec: &mut JobRecord,
    events: &mut EventLog,
    held: &Path,
    e: &jobwarden_sys::error::IoError,
) -> Result<(), JobError> {
    let why = format!(
        "{e}; the prompt stays at {} until the folder is fixed",
        held.display()
    );
    tracing::warn!(job = %rec.job_id, "prompt not moved: {why}");
    rec.archive_path = None;
    rec.inbox_path = Some(rel(layout, held));
    rec.extra.insert("archive_error".into(), json!(why));
    rec.save(layout)?;
    events.append(Op::ArchiveFailed, json!({"reason": why}));
    Ok(())
}

/// The record named a move that did not happen, `why` (the prompt is
/// nowhere to be found, or its claim is another host's now): say so in it.
fn not_moved(
    layout: &Layout,
    rec: &mut JobRecord,
    events: &mut EventLog,
    held: &Path,
    why: &str,
) -> Result<(), JobError> {
    tracing::warn!(job = %rec.job_id, "prompt not moved: {why} ({})", held.display());
    rec.archive_path = None;
    rec.inbox_path = None;
    rec.extra.insert("archive_error".into(), json!(why));
    rec.save(layout)?;
    events.append(Op::ArchiveFailed, json!({"reason": why}));
    Ok(())
}
