//! The job model: its id, its states with the one transition table, and the
//! record persisted as `job.json`. Who writes a record, and when, is decided
//! by the daemon (until a monitor starts) and the monitor (from then on).

mod id;
mod record;
mod slurm;
mod state;

pub use id::JobId;
pub use record::{
    DISPOSITION_MISSING, JobRecord, Overrides, Reconciled, RecordError, SCHEMA_VERSION,
};
pub use slurm::{SlurmRecord, SlurmState};
pub use state::{InvalidTransition, JobState};
