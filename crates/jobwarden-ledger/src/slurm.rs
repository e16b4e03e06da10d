//! The Slurm side of an execution (migration 12, `execution_slurm`): the
//! Slurm job id, the node, Slurm's last word and the time it waited apart
//! from the time it ran. Written with the execution row, in its
//! transaction; append-only like it.

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use super::{Ledger, LedgerError};
use jobwarden_model::job::JobRecord;

/// An execution's Slurm job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlurmRun {
    pub slurm_job_id: String,
    pub node: Option<String>,
    /// Slurm's last word on it (`COMPLETED`, `CANCELLED`…).
    pub state: Option<String>,
    pub pending_ms: Option<u64>,
    pub run_ms: Option<u64>,
}

impl SlurmRun {
    /// What a job's record says of its Slurm job, once it had an id.
    pub fn of(rec: &JobRecord) -> Option<SlurmRun> {
        let s = rec.slurm.as_ref()?;
        Some(SlurmRun {
            slurm_job_id: s.job_id.clone()?,
            node: s.node.clone(),
            state: s.state.as_ref().map(|st| st.as_str().to_owned()),
            pending_ms: s.pending_ms,
            run_ms: s.run_ms,
        })
    }
}

pub(super) fn insert(tx: &Connection, id: &str, run: &SlurmRun) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT OR IGNORE INTO execution_slurm (execution_id, slurm_job_id, node, state, pending_ms, run_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
)?
.execute(
        params![
            id,
            run.slurm_job_id,
            run.node,
            run.state,
            run.pending_ms.map(|v| v as i64),
            run.run_ms.map(|v| v as i64),
        ],
    )
    .map(drop)
}

impl Ledger {
    /// The Slurm job of execution `id`, if it ran on Slurm.
    pub fn slurm_run(&self, id: &str) -> Result<Option<SlurmRun>, LedgerError> {
        let ms = |v: Option<i64>| v.map(|v| v.max(0) as u64);
        self.conn
            .query_row(
                "SELECT slurm_job_id, node, state, pending_ms, run_ms FROM execution_slurm WHERE execution_id = ?1",
                [id],
                |r| {
                    Ok(SlurmRun {
                        slurm_job_id: r.get(0)?,
                        node: r.get(1)?,
                        state: r.get(2)?,
                        pending_ms: ms(r.get(3)?),
                        run_ms: ms(r.get(4)?),
                    })
                },
            )
            .optional()
            .map_err(|e| self.err(e))
    }
}
