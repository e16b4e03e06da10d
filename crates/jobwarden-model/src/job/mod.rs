//! The job model: its id, its states with the one transition table, and the
//! record persisted as `job.json`. Who writes a record, and when, is decided
//! by the daemon (until a monitor starts) and the monitor (from then on).

mod placed;
mod record;
mod slurm;

pub use crate::job_id::JobId;
pub use crate::state::{InvalidTransition, JobState};
pub use placed::{already_placed, holds_claimed_bytes};
pub use record::{
    DISPOSITION_MISSING, Durable, JobRecord, Overrides, Reconciled, RecordError, SCHEMA_VERSION,
    VIEW_OWED_FOR,
};
pub use slurm::{SlurmRecord, SlurmState};

/// Lower-case hex of `bytes` (a prompt's `prompt_sha256`).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
