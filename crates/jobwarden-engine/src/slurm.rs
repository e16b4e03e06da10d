//! Slurm, as jobwarden drives it: through its command-line clients
//! (`sbatch`, `squeue`, `scontrol`, `scancel`), whose flags have been
//! stable for years, never its REST daemon or its library.
//!
//! - A job is submitted with `sbatch --parsable` as a batch script that
//!   jobwarden writes ([`WRAPPER`]): it runs the job's command with the
//!   prompt on its stdin and writes two records of its own into the job's
//!   batch folder, `slurm-started.json` as it starts (the node, the time)
//!   and `slurm-exit.json` as the command ends (its exit code). The exit
//!   code comes from that record, checked against Slurm's state; Slurm's
//!   own exit codes are only the fallback.
//! - A job is named `jw-<job id>` (`--job-name`), so that a submission
//!   whose id was never recorded (a crash between `sbatch` and the record)
//!   is found again by name, never submitted twice, and so that a Slurm id
//!   in a forged `job.json` is never acted on: the name must match.
//! - The daemon asks about every Slurm job at once, every
//!   `slurm_poll_interval` ([`poll`]), and writes what Slurm said to
//!   `slurm.json` at the root ([`QueueFile`]); each monitor reads it.
//! - Slurm ids repeat after a controller is reinstalled: nothing is keyed
//!   on the id alone.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use jobwarden_model::job::JobId;
use jobwarden_sys::clock::Timestamp;

mod client;
pub use client::{
    CLIENT_TIMEOUT, ClientError, Submission, cancel, find, parse_scontrol, parse_squeue, poll,
    sbatch_args, show, submit,
};
pub use jobwarden_model::job::{SlurmRecord, SlurmState};

/// The batch script every Slurm job runs. Its arguments are the job's
/// command; `JOBWARDEN_SLURM_DIR` is its batch folder and
/// `JOBWARDEN_SLURM_STDIN` the prompt it reads. A SIGTERM (`scancel
/// --signal=TERM --full`, which Slurm sends to the command too) does not
/// stop it: the command's exit is still waited for and recorded.
pub const WRAPPER: &str = r#"#!/bin/sh
# Written by jobwarden: runs the job's command (this script's arguments)
# with its prompt on stdin, and records where it ran and how it ended.
dir="$JOBWARDEN_SLURM_DIR"
node="${SLURMD_NODENAME:-$(hostname)}"
now() { date -u +%Y-%m-%dT%H:%M:%S.%3NZ; }
record() {
    printf '%s\n' "$2" > "$dir/$1.tmp" && mv -f "$dir/$1.tmp" "$dir/$1"
}
record slurm-started.json "{\"host\":\"$node\",\"started_at\":\"$(now)\",\"slurm_job_id\":\"$SLURM_JOB_ID\"}"
# Slurm signals every process of the job (scancel --full): this script
# only outlives the signal, to record the command's end.
trap ':' TERM INT
"$@" < "${JOBWARDEN_SLURM_STDIN:-/dev/null}" &
child=$!
while :; do
    wait "$child"
    rc=$?
    kill -0 "$child" 2>/dev/null || break
done
record slurm-exit.json "{\"exit_code\":$rc,\"host\":\"$node\",\"ended_at\":\"$(now)\"}"
exit "$rc"
"#;

/// A job's name in Slurm.
pub fn job_name(id: &JobId) -> String {
    format!("jw-{id}")
}

/// Note what Slurm said of the job `rec` records.
pub fn saw(rec: &mut SlurmRecord, e: &QueueEntry) {
    rec.state = Some(e.state.clone());
    rec.reason = e.reason.clone();
    if e.node.is_some() {
        rec.node = e.node.clone();
    }
}

/// What Slurm says of one job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueEntry {
    pub state: SlurmState,
    /// Its name: `jw-<job id>` for a job of ours.
    pub name: String,
    /// The node(s) it runs on, once it does.
    #[serde(default)]
    pub node: Option<String>,
    /// Why it waits (`Resources`, `Priority`) or ended.
    #[serde(default)]
    pub reason: Option<String>,
    /// Slurm's exit code (`rc:signal`), when `scontrol` gave it.
    #[serde(default)]
    pub exit_code: Option<String>,
}

/// What the daemon's last poll found, at `slurm.json` under the root.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct QueueFile {
    /// When the poll was made (epoch ms).
    pub polled_at_ms: u64,
    /// Why the poll failed, when it did (the jobs are then last known).
    #[serde(default)]
    pub error: Option<String>,
    /// By Slurm job id: every job asked about that Slurm still knows.
    #[serde(default)]
    pub jobs: BTreeMap<String, QueueEntry>,
    /// The ids asked about (one missing from `jobs` is unknown to Slurm).
    #[serde(default)]
    pub asked: Vec<String>,
}

impl QueueFile {
    /// Read `path` (under `root`); `None` when missing or unreadable.
    pub fn read(root: &Path, path: &Path) -> Option<QueueFile> {
        let (bytes, over) =
            jobwarden_sys::fsio::read_capped(root, path, client::MAX_OUTPUT as u64).ok()?;
        if over {
            return None;
        }
        serde_json::from_slice(&bytes).ok()
    }
}

/// What the batch script recorded as the command started.
#[derive(Debug, Clone, Deserialize)]
pub struct Started {
    pub host: String,
    pub started_at: Timestamp,
}

/// What the batch script recorded as the command ended.
#[derive(Debug, Clone, Deserialize)]
pub struct Exited {
    pub exit_code: i32,
    #[serde(default)]
    pub host: Option<String>,
    #[serde(default)]
    pub ended_at: Option<Timestamp>,
}

/// Read a record the batch script writes (a small JSON file, regular, not
/// a symlink); `None` until it is there and whole.
pub fn read_record<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    use std::io::Read;
    let dir = path.parent()?;
    let file = jobwarden_sys::fsio::open_file(dir, path).ok()?;
    let mut bytes = Vec::new();
    file.take(64 * 1024).read_to_end(&mut bytes).ok()?;
    serde_json::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machine_failures_are_told_from_the_job_s() {
        assert!(SlurmState("NODE_FAIL".into()).is_infrastructure());
        assert!(!SlurmState("FAILED".into()).is_infrastructure());
        assert!(!SlurmState("CANCELLED".into()).is_active());
        assert!(SlurmState("PENDING".into()).is_pending());
    }
}
