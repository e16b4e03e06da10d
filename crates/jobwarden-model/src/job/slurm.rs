//! `job.json`'s `slurm`: a job run as a Slurm batch job, as its record
//! keeps it, and Slurm's word for where a job is. The record's part of
//! the contract; driving Slurm is the Slurm client's.

use serde::{Deserialize, Serialize};

use jobwarden_sys::clock::Timestamp;

/// Slurm's word for where a job is (`squeue %T`, `scontrol JobState=`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SlurmState(pub String);

impl SlurmState {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Still to run, or running.
    pub fn is_active(&self) -> bool {
        matches!(
            self.0.as_str(),
            "PENDING"
                | "RUNNING"
                | "CONFIGURING"
                | "COMPLETING"
                | "SUSPENDED"
                | "REQUEUED"
                | "REQUEUE_FED"
                | "REQUEUE_HOLD"
                | "RESIZING"
                | "SIGNALING"
                | "STAGE_OUT"
                | "STOPPED"
                | "RESV_DEL_HOLD"
                | "SPECIAL_EXIT"
        )
    }

    pub fn is_pending(&self) -> bool {
        matches!(
            self.0.as_str(),
            "PENDING" | "CONFIGURING" | "REQUEUED" | "REQUEUE_HOLD" | "RESV_DEL_HOLD"
        )
    }

    /// Ended because the machine, not the job, failed: another attempt
    /// may be made (`interrupted`).
    pub fn is_infrastructure(&self) -> bool {
        matches!(
            self.0.as_str(),
            "NODE_FAIL" | "BOOT_FAIL" | "PREEMPTED" | "DEADLINE"
        )
    }
}

/// `job.json`'s `slurm`: a job run as a Slurm batch job, as its monitor
/// knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlurmRecord {
    /// Slurm's job id; null while the submission is under way (a monitor
    /// that finds it so looks the job up by its name).
    pub job_id: Option<String>,
    /// Its name in Slurm: `jw-<job id>`.
    pub name: String,
    /// Its batch folder: its script, its output, the script's records.
    pub batch_dir: String,
    pub submitted_at: Timestamp,
    /// Slurm's state when last asked (`PENDING`, `RUNNING`, `COMPLETED`…).
    #[serde(default)]
    pub state: Option<SlurmState>,
    /// Why it waits or ended, as Slurm said.
    #[serde(default)]
    pub reason: Option<String>,
    /// Where its command ran.
    #[serde(default)]
    pub node: Option<String>,
    /// When its command started and ended on the node.
    #[serde(default)]
    pub started_at: Option<Timestamp>,
    #[serde(default)]
    pub ended_at: Option<Timestamp>,
    /// From the submission to the command's start.
    #[serde(default)]
    pub pending_ms: Option<u64>,
    /// From the command's start to its end.
    #[serde(default)]
    pub run_ms: Option<u64>,
    /// Bytes of its batch output copied into `job.log` so far.
    #[serde(default)]
    pub output_bytes: u64,
}

impl SlurmRecord {
    /// Note the command's start (once), and the time it waited for it.
    pub fn started(&mut self, at: Timestamp, node: Option<String>) {
        if self.started_at.is_none() {
            self.started_at = Some(at);
            let waited = at.epoch_ms().saturating_sub(self.submitted_at.epoch_ms());
            self.pending_ms = Some(waited);
        }
        if node.is_some() {
            self.node = node;
        }
    }

    /// Note the command's end (once), and how long it ran.
    pub fn ended(&mut self, at: Timestamp) {
        if self.ended_at.is_none() {
            self.ended_at = Some(at);
            let since = self.started_at.unwrap_or(at);
            self.run_ms = Some(at.epoch_ms().saturating_sub(since.epoch_ms()));
        }
    }
}
