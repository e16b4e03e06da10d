//! The ABORT marker contract: any tool may create `runs/<job_id>/ABORT`
//! (any content) to abort a job. `jobwarden abort` writes it atomically as
//! JSON with the time and an optional reason, once (a second request
//! leaves the first in place and is told so); readers take a reason from
//! JSON `reason`, or else the first line of plain text. The daemon never
//! removes a marker.

use serde::{Deserialize, Serialize};

use crate::job::{JobId, JobState};
use crate::layout::Layout;
use jobwarden_sys::clock::Timestamp;
use jobwarden_sys::error::IoError;
use jobwarden_sys::fsio;

/// Longest reason kept from a marker.
pub const MAX_REASON: usize = 200;

#[derive(Debug, Serialize, Deserialize)]
struct Marker {
    requested_at: Option<Timestamp>,
    reason: Option<String>,
    #[serde(default)]
    by: Option<String>,
}

/// What [`write_marker`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requested {
    /// This call wrote the marker.
    Now,
    /// A marker was already there (another `abort`, a tool): it is left as
    /// it is; its time, when it says one.
    Already(Option<Timestamp>),
}

/// Write the ABORT marker of `id` atomically, unless it already has one:
/// one request per job, so that two aborts racing each other (or a tool)
/// never replace each other's reason, and the second is told.
pub fn write_marker(
    layout: &Layout,
    id: &JobId,
    reason: Option<&str>,
) -> Result<Requested, IoError> {
    let by = format!("jobwarden abort (uid {})", nix::unistd::getuid());
    write_marker_by(layout, id, reason, &by)
}

/// [`write_marker`] for a request made by `by` (the daemon's reconcile).
pub fn write_marker_by(
    layout: &Layout,
    id: &JobId,
    reason: Option<&str>,
    by: &str,
) -> Result<Requested, IoError> {
    let marker = Marker {
        requested_at: Some(Timestamp::now()),
        reason: reason.map(str::to_owned),
        by: Some(by.to_owned()),
    };
    let path = layout.abort_marker(id);
    let mut bytes = serde_json::to_vec_pretty(&marker)
        .map_err(|e| IoError::new("serialising", &path, std::io::Error::other(e)))?;
    bytes.push(b'\n');
    if fsio::create_new_atomic(layout.root(), &path, &bytes)? {
        return Ok(Requested::Now);
    }
    Ok(Requested::Already(requested_at(layout, id)))
}

/// When the marker of `id` says it was written, if it is ours.
fn requested_at(layout: &Layout, id: &JobId) -> Option<Timestamp> {
    let (bytes, _) =
        fsio::read_capped(layout.root(), &layout.abort_marker(id), MAX_MARKER_BYTES).ok()?;
    serde_json::from_slice::<Marker>(&bytes).ok()?.requested_at
}

/// Longest marker content read; the rest is ignored.
const MAX_MARKER_BYTES: u64 = 4096;

/// Does `id` have an ABORT marker? Any kind of file counts, even a
/// symlink (which is never followed).
pub fn requested(layout: &Layout, id: &JobId) -> bool {
    std::fs::symlink_metadata(layout.abort_marker(id)).is_ok()
}

/// The `state_reason` for a job ended by its marker in state `ended`
/// (`aborted`, or `cancelled` when it had not started: see
/// [`JobState::stopped_by_request`]). Only the first 4 KiB of a regular
/// file are read: a FIFO, device or symlink marker ends the job all the
/// same, without a reason, and can never block the reader.
pub fn reason(layout: &Layout, id: &JobId, ended: JobState) -> String {
    let text = fsio::read_capped(layout.root(), &layout.abort_marker(id), MAX_MARKER_BYTES)
        .map(|(bytes, _)| bytes)
        .unwrap_or_default();
    let how = if ended == JobState::Cancelled {
        "cancelled"
    } else {
        "aborted"
    };
    match marker_reason(&text) {
        Some(r) => format!("{how} by request: {r}"),
        None => format!("{how} by request (ABORT marker)"),
    }
}

pub fn marker_reason(bytes: &[u8]) -> Option<String> {
    let from_json = serde_json::from_slice::<Marker>(bytes)
        .ok()
        .map(|m| m.reason);
    let text = match from_json {
        Some(reason) => reason?,
        None => String::from_utf8_lossy(bytes).lines().next()?.to_owned(),
    };
    let text: String = text
        .trim()
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_REASON)
        .collect();
    (!text.is_empty()).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_from_json_plain_text_or_nothing() {
        assert_eq!(
            marker_reason(br#"{"requested_at":null,"reason":"wrong repo"}"#).as_deref(),
            Some("wrong repo")
        );
        assert_eq!(
            marker_reason(br#"{"requested_at":null,"reason":null}"#),
            None
        );
        assert_eq!(
            marker_reason(b"  stop it\nmore").as_deref(),
            Some("stop it")
        );
        assert_eq!(marker_reason(b""), None);
        assert_eq!(
            marker_reason(&[0xff, 0xfe]).as_deref(),
            Some("\u{fffd}\u{fffd}")
        );
    }

    #[test]
    fn written_marker_round_trips() {
        let dir = tempfile::tempdir().expect("tempdir");
        let layout = Layout::new(dir.path());
        let id = JobId::generate();
        std::fs::create_dir_all(layout.run_dir(&id)).expect("run dir");
        assert!(!requested(&layout, &id));
        let first = write_marker(&layout, &id, Some("operator said so")).expect("write");
        assert_eq!(first, Requested::Now);
        assert!(requested(&layout, &id));
        let second = write_marker(&layout, &id, Some("me too")).expect("second");
        assert!(matches!(second, Requested::Already(Some(_))), "{second:?}");
        assert_eq!(
            reason(&layout, &id, JobState::Aborted),
            "aborted by request: operator said so"
        );
        assert_eq!(
            reason(&layout, &id, JobState::Cancelled),
            "cancelled by request: operator said so"
        );
    }
}
