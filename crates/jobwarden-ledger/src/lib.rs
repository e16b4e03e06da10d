//! jobwarden-ledger: the execution-history ledger (`ledger.db`, DESIGN §7),
//! real SQLite in WAL mode, so the CLI reads while the daemon and monitors
//! write. This file opens it (pragmas, migrations). Writes are fail-soft for
//! jobs (DESIGN §10): a job whose row cannot be inserted still ends, and its
//! row is backfilled from its `job.json` later.
//!
//! - `migrations.rs` — the append-only schema.
//! - `guard.rs` — what `ledger.db`, `-wal` and `-shm` must be before SQLite opens them.
//! - `execution.rs` — one execution's row, its artifacts and paths, and how it is written.
//! - `outcome.rs` — outcome names and their mapping to job states.
//! - `query.rs` — the reads that drive decisions (cooldown, attempts).
//! - `jobs.rs` — the job index: a cache of every run folder's `job.json` for the CLI.
//! - `lookup.rs` — the reads behind a `<job>` argument beyond the index.
//! - `short_id.rs` — the short form of an id that tables show and lookups take.
//! - [`history`] — the CLI's queries (list, stats, export).
//! - `attention.rs` — what needs the operator's attention, and `ack`.
//! - `diagnostics.rs` — each execution's compiler and linter diagnostics, and questions of them.
//! - `published.rs` — each execution's published branch, watched until settled.
//! - `prompt_text.rs` — the text of the prompt each execution ran, compressed.
//! - `slurm.rs` — each execution's Slurm job: id, node, Slurm's word, time pending and running.
//! - `batch.rs` — the last batch of work and its completion summary.
//! - `metrics.rs` — the counts the metrics exposition reads.
//! - `retention.rs` — artifact pruning.
//! - [`backfill`] — rows restored from run folders.
//! - [`health`] — what a damaged file is; the condition `status` shows.
//! - [`repair`] — a damaged file moved aside and rebuilt from `runs/`.
//! - `tests.rs` — unit tests of the ledger as a whole (rows written, read, pruned).

mod attention;
pub mod backfill;
mod batch;
mod diagnostics;
mod execution;
mod guard;
pub mod health;
pub mod history;
mod jobs;
mod lookup;
mod metrics;
mod migrations;
mod outcome;
mod prompt_text;
mod published;
mod query;
pub mod repair;
mod retention;
mod short_id;
mod slurm;

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

pub use attention::{Attention, Standing};
pub use batch::{CompletionSummary, IDLE_ENDS_A_BATCH_MS};
pub use diagnostics::{CodeCount, CodeHit, FileCount, StoredDiagnostic};
pub use execution::{Artifact, Execution, Handed, PathRelation, Source, stored_path};
pub use jobs::{IndexedJob, JobFilter, JobOrder};
pub use metrics::{Bucket, Durations};
pub use migrations::LATEST as SCHEMA_VERSION;
pub use outcome::Outcome;
pub use prompt_text::{KEPT_BYTES as PROMPT_KEPT_BYTES, PromptText};
pub use published::{Published, PublishedRow, Settled, Watched};
pub use query::{Cooldowns, Ended, LastRun};
pub use short_id::{SHORT_ID_MAX, short_id};
pub use slurm::SlurmRun;

/// How long a writer waits for another writer's lock before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// A ledger failure, naming the database file (and, when the file itself
/// is damaged, what to do about it).
#[derive(Debug)]
pub struct LedgerError {
    pub path: PathBuf,
    pub source: rusqlite::Error,
}

impl std::fmt::Display for LedgerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.what())?;
        if self.is_damaged() {
            write!(f, "; {}", health::REPAIR_FIX)?;
        }
        Ok(())
    }
}

impl std::error::Error for LedgerError {
    /// None for damage and for the ledger's own refusals: the message
    /// already says all, and ends with the fix.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        let own = matches!(self.source, rusqlite::Error::InvalidParameterName(_));
        (!self.is_damaged() && !own).then_some(&self.source as _)
    }
}

impl LedgerError {
    /// Is the database file itself damaged (see [`health`])?
    pub fn is_damaged(&self) -> bool {
        health::is_damage(&self.source)
    }

    /// What went wrong, naming the file.
    pub fn what(&self) -> String {
        let damaged = if self.is_damaged() { " is damaged" } else { "" };
        let said = match &self.source {
            rusqlite::Error::InvalidParameterName(own) => own.clone(),
            e => e.to_string(),
        };
        format!("ledger {}{damaged}: {said}", self.path.display())
    }

    /// What to do about it; `None` when the message says it already (one
    /// of the ledger's own refusals, [`refusal`]).
    pub fn fix(&self) -> Option<&'static str> {
        if self.is_damaged() {
            Some(health::REPAIR_FIX)
        } else if matches!(self.source, rusqlite::Error::InvalidParameterName(_)) {
            None
        } else {
            Some("check that the file can be read and written, and that the disk has space")
        }
    }
}

/// One of the ledger's own refusals (a schema newer than this binary, an
/// impossible time, a value the schema does not know), carried as a
/// SQLite error: `msg` says all, what to do included, and is shown as it
/// is ([`LedgerError::what`]).
pub(crate) fn refusal(msg: String) -> rusqlite::Error {
    rusqlite::Error::InvalidParameterName(msg)
}

/// An open ledger.
pub struct Ledger {
    conn: Connection,
    path: PathBuf,
}

/// The undo of a savepoint (SQLite's statement journal) is kept in memory
/// up to this size, then spilled to a temporary file. Each write in a group
/// (see [`Ledger::begin_group`]) is a savepoint; an end's rows change about
/// 27 pages (108 KiB), over SQLite's own 64 KiB: its undo went to a file,
/// and once spilled, every later page of the group was written there
/// (about 60 `pwrite`s a job). Under this size the undo is kept in memory
/// and let go of at each savepoint's release; over it, it still spills.
const SAVEPOINT_UNDO_IN_MEMORY: i32 = 1024 * 1024;

/// Set [`SAVEPOINT_UNDO_IN_MEMORY`] for this process, once, before its
/// first connection (SQLite takes it only before it is initialised; a
/// process that opened a connection some other way keeps the default).
fn keep_savepoints_in_memory() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: `sqlite3_config` with this option takes one `int`; it
        // is called before any connection of this process is opened
        // through the ledger, and answers SQLITE_MISUSE (ignored: the
        // default stays) if SQLite was initialised already.
        unsafe {
            rusqlite::ffi::sqlite3_config(
                rusqlite::ffi::SQLITE_CONFIG_STMTJRNL_SPILL,
                SAVEPOINT_UNDO_IN_MEMORY,
            );
        }
    });
}

impl Ledger {
    /// Open (creating if missing) and bring the schema up to date.
    ///
    /// Writers that race to create a fresh ledger can get "database is
    /// locked" from the switch to WAL, which SQLite does not retry through
    /// the busy handler: the whole open is retried, for up to the busy
    /// timeout.
    pub fn open(path: &Path) -> Result<Self, LedgerError> {
        let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
        let mut pause = Duration::from_millis(5);
        loop {
            match Self::open_once(path) {
                Err(e) if is_busy(&e.source) && std::time::Instant::now() < deadline => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(100));
                }
                other => return other,
            }
        }
    }

    fn open_once(path: &Path) -> Result<Self, LedgerError> {
        let err = |source| LedgerError {
            path: path.to_path_buf(),
            source,
        };
        keep_savepoints_in_memory();
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_NOFOLLOW;
        let checked = guard::check(path)?;
        let mut conn = Connection::open_with_flags(&checked.sqlite_path, flags)
            .map_err(|e| guard::explain(path, err(e)))?;
        guard::verify(path, &checked)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(err)?;
        if jobwarden_sys::fault::asked("ledger-full") {
            // A ledger that refuses writes while files are still written.
            conn.commit_hook(Some(|| jobwarden_sys::fault::armed("ledger-full")))
                .map_err(err)?;
        }
        // Judge the file before writing anything to it: a damaged one is
        // moved aside by `history repair` exactly as it was found.
        let found = health::check_before_migrating(&conn).map_err(err)?;
        // WAL: readers never block the writer nor each other. NORMAL sync is
        // durable across process crashes; the job's journal (its record)
        // remains the source of truth a lost row is backfilled from after a
        // power cut.
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(err)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(err)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(err)?;
        // 512 KiB of page cache per connection (SQLite's default is 2 MiB):
        // the queries walk indexes, and the daemon and monitors stay small.
        conn.pragma_update(None, "cache_size", -512).map_err(err)?;
        let migrated = migrations::migrate(&mut conn).map_err(health::migration_error);
        match migrated.map_err(err)? {
            migrations::MigrateOutcome::Current => {}
            migrations::MigrateOutcome::TooNew(v) => {
                let msg = format!(
                    "schema version {v} is newer than this jobwarden understands ({}); upgrade jobwarden",
                    migrations::LATEST
                );
                return Err(err(refusal(msg)));
            }
        }
        if found < migrations::LATEST {
            health::check_schema(&conn).map_err(err)?;
        }
        Ok(Ledger {
            conn,
            path: path.to_path_buf(),
        })
    }

    /// Make the writes until [`Ledger::end_group`] one commit (`BEGIN
    /// IMMEDIATE`; each write is a savepoint inside it): a burst of claims'
    /// index rows, each page written once. False when no group could be
    /// begun (one is open, or another writer holds the ledger past the
    /// busy timeout): the writes are then each their own commit.
    pub fn begin_group(&mut self) -> bool {
        self.conn.is_autocommit() && self.conn.execute_batch("BEGIN IMMEDIATE").is_ok()
    }

    /// Commit the group [`Ledger::begin_group`] began. On failure it is
    /// rolled back and the error returned: what it held is lost, as a
    /// write that failed on its own (every write in a group is one the
    /// start-up check repairs).
    pub fn end_group(&mut self) -> Result<(), LedgerError> {
        if self.conn.is_autocommit() {
            return Ok(());
        }
        let committed = self.conn.execute_batch("COMMIT");
        if committed.is_err() && !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        committed.map_err(|e| self.err(e))
    }

    /// Open for reading only, as a snapshot that takes no locks and writes
    /// nothing (SQLite's `immutable`): for reading a root on a read-only
    /// filesystem, where a normal open fails (WAL needs to write its index).
    /// The schema must already be current.
    pub fn open_snapshot(path: &Path) -> Result<Self, LedgerError> {
        let err = |source| LedgerError {
            path: path.to_path_buf(),
            source,
        };
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_NOFOLLOW;
        let checked = guard::check(path)?;
        let mut uri = url_path(&checked.sqlite_path);
        uri.insert_str(0, "file:");
        uri.push_str("?immutable=1");
        let conn =
            Connection::open_with_flags(&uri, flags).map_err(|e| guard::explain(path, err(e)))?;
        guard::verify(path, &checked)?;
        let version: u32 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(err)?;
        if version != migrations::LATEST {
            let msg = format!(
                "schema version {version}, and this jobwarden reads {} (open it writable once to migrate it)",
                migrations::LATEST
            );
            return Err(err(refusal(msg)));
        }
        health::check_schema(&conn).map_err(err)?;
        Ok(Ledger {
            conn,
            path: path.to_path_buf(),
        })
    }

    /// Read every page (`PRAGMA quick_check`): damage an open does not see
    /// (a truncated file, a corrupt index). O(size of the file).
    pub fn quick_check(&self) -> Result<(), LedgerError> {
        health::quick_check(&self.conn).map_err(|e| self.err(e))
    }

    /// Give the connection's page cache and statement memory back
    /// (`PRAGMA shrink_memory`); they fill again as queries need them.
    pub fn release_memory(&self) {
        if let Err(e) = self.conn.execute_batch("PRAGMA shrink_memory") {
            tracing::debug!("{}", self.err(e));
        }
    }

    /// The file this ledger was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, source: rusqlite::Error) -> LedgerError {
        LedgerError {
            path: self.path.clone(),
            source,
        }
    }
}

/// Is `e` another connection holding a lock (worth retrying)?
fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// `path` for a `file:` URI: `%`, `?` and `#` escaped.
fn url_path(path: &Path) -> String {
    let mut out = String::new();
    for c in path.to_string_lossy().chars() {
        match c {
            '%' => out.push_str("%25"),
            '?' => out.push_str("%3f"),
            '#' => out.push_str("%23"),
            c => out.push(c),
        }
    }
    out
}

/// A time tests write rows at (2023-11-14): the schema refuses times
/// before 2020. Tests count from it.
#[cfg(test)]
pub(crate) const T0: u64 = 1_700_000_000_000;

#[cfg(test)]
mod tests;
