//! `history repair` as a library call: a ledger that is damaged (it does
//! not open as jobwarden's, or `PRAGMA quick_check` finds faults) is moved
//! aside with its `-wal` and `-shm` (never deleted) and a fresh one is
//! created; then every row that `runs/*/job.json` can give back is
//! backfilled (`backfill.rs`), into the fresh ledger or the healthy one.
//!
//! Safe while the daemon runs: monitors open the ledger for each write, and
//! the daemon reopens `ledger.db` when its identity (device, inode) changes,
//! so both write to the new file from then on.

use std::path::PathBuf;

use serde::Serialize;

use super::{Ledger, LedgerError, backfill};
use jobwarden_model::layout::{Layout, sqlite_sidecars};
use jobwarden_sys::clock::Timestamp;
use jobwarden_sys::fsio::{self, Renamed};

/// What a repair did.
#[derive(Debug, Serialize)]
pub struct Repaired {
    /// The damage found, naming the file (none: the ledger was healthy).
    pub damage: Option<String>,
    /// Where the damaged files went, in the order they were moved.
    pub moved_aside: Vec<PathBuf>,
    #[serde(flatten)]
    pub backfill: backfill::Report,
}

/// Why a repair could not be done.
#[derive(Debug, thiserror::Error)]
pub enum RepairError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error("moving the damaged ledger aside: {0}")]
    Io(#[from] jobwarden_sys::error::IoError),
    #[error("moving the damaged ledger aside: {from} could not be moved to {to} ({why})")]
    NotMoved {
        from: PathBuf,
        to: PathBuf,
        why: &'static str,
    },
}

/// Check the ledger, set it aside if damaged, and backfill.
/// `being_finished`: see [`backfill::run`].
pub fn repair(
    layout: &Layout,
    being_finished: &dyn Fn(&jobwarden_model::job::JobRecord) -> bool,
) -> Result<Repaired, RepairError> {
    let damage = diagnose(layout)?;
    let moved_aside = match &damage {
        Some(_) => set_aside(layout)?,
        None => Vec::new(),
    };
    let mut ledger = Ledger::open(&layout.ledger())?;
    let backfill = backfill::run(layout, &mut ledger, being_finished);
    Ok(Repaired {
        damage: damage.map(|e| e.what()),
        moved_aside,
        backfill,
    })
}

/// The damage of `ledger.db`, if any; an error that is not damage (a lock
/// held too long, a full disk) stops the repair.
fn diagnose(layout: &Layout) -> Result<Option<LedgerError>, LedgerError> {
    let checked = Ledger::open(&layout.ledger()).and_then(|l| l.quick_check());
    match checked {
        Ok(()) => Ok(None),
        Err(e) if e.is_damaged() => Ok(Some(e)),
        Err(e) => Err(e),
    }
}

/// Move `ledger.db` and its sidecars to `ledger.db.corrupt-<ms>[-wal|-shm]`.
/// The sidecars go first: a fresh `ledger.db` must never meet the damaged
/// file's write-ahead log.
fn set_aside(layout: &Layout) -> Result<Vec<PathBuf>, RepairError> {
    let db = layout.ledger();
    let mut stamp = Timestamp::now().epoch_ms();
    // A name already taken (two repairs in one millisecond) takes the next.
    while std::fs::symlink_metadata(layout.corrupt_ledger(stamp)).is_ok() {
        stamp += 1;
    }
    let aside = layout.corrupt_ledger(stamp);
    let pairs = sqlite_sidecars(&db)
        .into_iter()
        .zip(sqlite_sidecars(&aside))
        .chain([(db, aside)]);
    let mut moved = Vec::new();
    for (from, to) in pairs {
        match fsio::rename_noreplace(layout.root(), &from, &to)? {
            Renamed::Done => moved.push(to),
            Renamed::SourceGone => {}
            Renamed::TargetExists => {
                return Err(RepairError::NotMoved {
                    from,
                    to,
                    why: "a file of that name exists",
                });
            }
        }
    }
    Ok(moved)
}
