//! `daemon.json`: the daemon's pid, start time, version and heartbeat, for
//! `status` and for tools. Fail-soft (DESIGN §10): a failed write is logged,
//! never fatal.

use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use crate::clock::Timestamp;
use crate::fsio;
use crate::layout::Layout;

#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Starting,
    Running,
    /// Shutting down, waiting for running jobs (`drain` or `abort`).
    Stopping,
    Stopped,
}

/// What `daemon.json` holds.
#[derive(Debug, Serialize)]
pub struct DaemonFile<'a> {
    pub pid: u32,
    pub started_at: Timestamp,
    pub heartbeat_at: Timestamp,
    pub version: &'static str,
    pub host: &'a str,
    pub root: &'a std::path::Path,
    pub phase: Phase,
    pub running: usize,
    pub queued: usize,
    /// `inotify`, or `rescan` after the watch failed (then only rescans find prompts).
    pub watch: &'static str,
}

/// Write `daemon.json`. A failure (disk full, read-only root) is reported
/// when it starts and when it ends, not on every heartbeat.
pub fn write(layout: &Layout, file: &DaemonFile<'_>) {
    static FAILING: AtomicBool = AtomicBool::new(false);
    match fsio::write_json_atomic(&layout.daemon_json(), file) {
        Ok(()) if FAILING.swap(false, Ordering::Relaxed) => {
            tracing::info!("daemon.json can be written again");
        }
        Ok(()) => {}
        Err(e) if !FAILING.swap(true, Ordering::Relaxed) => {
            tracing::warn!("{e}; daemon.json stays stale until this can be written");
        }
        Err(_) => {}
    }
}
