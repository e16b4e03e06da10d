//! A queued job's priority changed by hand (`jobwarden priority <job>
//! <n>`): the request `runs/<job_id>/PRIORITY`, JSON `{"priority", "by",
//! "requested_at"}`, written atomically (renamed in, so that a watch sees
//! it whole). Whoever schedules the job takes it: the daemon at once (it
//! watches queued jobs' run folders, and looks at every tick), else the
//! CLI itself when no daemon runs. Taking it changes the record's
//! `priority`, says so in a `priority` event and removes the request; a
//! job no longer queued has its request removed unused.

use serde::{Deserialize, Serialize};

use crate::events::{EventLog, Op};
use crate::front_matter::PRIORITY_RANGE;
use crate::job::{JobId, JobRecord, JobState, RecordError};
use crate::layout::Layout;
use jobwarden_sys::clock::Timestamp;
use jobwarden_sys::fsio;

/// The request's name in a run folder.
pub const PRIORITY_FILE: &str = "PRIORITY";

/// Longest request read.
const MAX_BYTES: u64 = 4096;

/// A request to change a queued job's priority.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub priority: i32,
    #[serde(default)]
    pub by: Option<String>,
    #[serde(default)]
    pub requested_at: Option<Timestamp>,
}

impl Layout {
    /// `runs/<id>/PRIORITY`: a request to change a queued job's priority.
    pub fn priority_request(&self, id: &JobId) -> std::path::PathBuf {
        self.run_dir(id).join(PRIORITY_FILE)
    }
}

/// Ask for job `id`'s priority to be `priority` (checked to be in range).
pub fn request(layout: &Layout, id: &JobId, priority: i32, by: &str) -> Result<(), String> {
    if !PRIORITY_RANGE.contains(&priority) {
        return Err(format!(
            "priority {priority} must be a whole number from {} to {}",
            PRIORITY_RANGE.start(),
            PRIORITY_RANGE.end()
        ));
    }
    let req = Request {
        priority,
        by: Some(by.to_owned()),
        requested_at: Some(Timestamp::now()),
    };
    let path = layout.priority_request(id);
    let bytes = serde_json::to_vec(&req).map_err(|e| e.to_string())?;
    fsio::write_atomic(layout.root(), &path, &bytes).map_err(|e| e.to_string())
}

/// The request waiting for job `id`, if one is there and reads whole;
/// one that does not is removed (a careless writer's), and `None`.
pub fn waiting(layout: &Layout, id: &JobId) -> Option<Request> {
    let path = layout.priority_request(id);
    let (bytes, _) = fsio::read_capped(layout.root(), &path, MAX_BYTES).ok()?;
    match serde_json::from_slice::<Request>(&bytes) {
        Ok(req) if PRIORITY_RANGE.contains(&req.priority) => Some(req),
        _ => {
            tracing::warn!(job = %id, "{} is not a priority request; removed", path.display());
            let _ = fsio::remove_file(layout.root(), &path);
            None
        }
    }
}

/// Take job `id`'s request, if any: its record's priority changed (a
/// queued job's only), a `priority` event, the request removed. The old
/// and new priorities when it changed.
pub fn take(
    layout: &Layout,
    rec: &mut JobRecord,
    events: &mut EventLog,
) -> Result<Option<(i32, i32)>, RecordError> {
    let id = rec.job_id.clone();
    let Some(req) = waiting(layout, &id) else {
        return Ok(None);
    };
    let changed = if rec.state == JobState::Queued && rec.priority != req.priority {
        let from = rec.priority;
        rec.priority = req.priority;
        rec.save(layout)?;
        events.append(
            Op::Priority,
            serde_json::json!({"from": from, "to": req.priority, "by": req.by}),
        );
        Some((from, req.priority))
    } else {
        None
    };
    if let Err(e) = fsio::remove_file(layout.root(), &layout.priority_request(&id)) {
        tracing::warn!(job = %id, "{e}; the request is taken again, to no effect");
    }
    Ok(changed)
}

/// Why [`request`] cannot be met: not a queued job's.
pub fn not_queued(rec: &JobRecord) -> Option<String> {
    (rec.state != JobState::Queued).then(|| {
        format!(
            "job {} is {}: only a queued job's priority can change",
            rec.job_id, rec.state
        )
    })
}
