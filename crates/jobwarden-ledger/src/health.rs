//! Is `ledger.db` usable: which failures mean the file itself is damaged
//! (not a database, a malformed image, a schema that is not jobwarden's,
//! `PRAGMA quick_check` finding faults) as opposed to a passing condition
//! (a busy lock, a full disk), and the ledger's condition as `status`
//! reports it. Damage is never repaired silently: `history repair` moves
//! the file aside and rebuilds it (`commands/history/repair.rs`).

use std::collections::{BTreeMap, BTreeSet};

use rusqlite::{Connection, ErrorCode, ffi};
use serde::{Deserialize, Serialize};

/// What an operator does about a damaged ledger.
pub const REPAIR_FIX: &str = "run `jobwarden history repair`: it moves the damaged file aside (never deleting it) and rebuilds the ledger from runs/*/job.json";

/// Does `e` say the database file itself is damaged?
pub fn is_damage(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt)
    )
}

/// A damage error with its own message (SQLite's code for a malformed
/// image, so that every caller classifies it like SQLite's own).
pub fn damaged(msg: String) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(ffi::Error::new(ffi::SQLITE_CORRUPT), Some(msg))
}

/// A migration that fails on SQL (a table it creates already exists, one
/// it alters does not) met a schema that is not jobwarden's: damage. Other
/// failures (locks, a full disk) pass through unchanged.
pub fn migration_error(e: rusqlite::Error) -> rusqlite::Error {
    match &e {
        rusqlite::Error::SqlInputError { msg, .. } => {
            damaged(format!("the schema is not jobwarden's ({msg})"))
        }
        _ if e.sqlite_error_code() == Some(ErrorCode::Unknown) => {
            damaged(format!("the schema is not jobwarden's ({e})"))
        }
        _ => e,
    }
}

/// Before anything is written to a file being opened: it must read as a
/// database (garbage fails here), one without a schema version must hold
/// no tables (else it is some other program's), and one at the latest
/// version must hold jobwarden's schema. Returns the schema version found.
pub fn check_before_migrating(conn: &Connection) -> rusqlite::Result<u32> {
    // One statement, so one snapshot: read apart, another process's first
    // migration could land between the two reads (version 0, yet tables).
    let (version, tables): (u32, u32) = conn.query_row(
        "SELECT (SELECT user_version FROM pragma_user_version), \
                (SELECT count(*) FROM sqlite_schema WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\')",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    if version == 0 {
        if tables > 0 {
            return Err(damaged(
                "the schema is not jobwarden's: it holds other tables, and no jobwarden schema version"
                    .into(),
            ));
        }
    } else if version == super::migrations::LATEST {
        check_schema(conn)?;
    }
    Ok(version)
}

/// Every table the migrations create has at least their columns: a file
/// carrying the right `user_version` over another schema is damage, found
/// here rather than by the first query that needs a missing table.
pub fn check_schema(conn: &Connection) -> rusqlite::Result<()> {
    let actual = columns(conn)?;
    for (table, wanted) in super::migrations::TABLES {
        let Some(have) = actual.get(*table) else {
            return Err(damaged(format!(
                "the schema is not jobwarden's: table {table} is missing"
            )));
        };
        if let Some(col) = wanted.split_whitespace().find(|c| !have.contains(*c)) {
            return Err(damaged(format!(
                "the schema is not jobwarden's: table {table} has no column {col}"
            )));
        }
    }
    Ok(())
}

/// `PRAGMA quick_check`: reads every page (O(size)); the first faults it
/// reports make the error.
pub fn quick_check(conn: &Connection) -> rusqlite::Result<()> {
    let mut stmt = conn.prepare("PRAGMA quick_check(5)")?;
    let lines: Vec<String> = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<_>>()?;
    if lines.len() == 1 && lines[0] == "ok" {
        return Ok(());
    }
    Err(damaged(format!("quick_check: {}", lines.join("; "))))
}

/// Table name → column names.
type Columns = BTreeMap<String, BTreeSet<String>>;

fn columns(conn: &Connection) -> rusqlite::Result<Columns> {
    let mut stmt = conn.prepare(
        "SELECT m.name, p.name FROM sqlite_schema AS m, pragma_table_info(m.name) AS p \
         WHERE m.type = 'table'",
    )?;
    let mut out = Columns::new();
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
    for row in rows {
        let (table, column) = row?;
        out.entry(table).or_default().insert(column);
    }
    Ok(out)
}

/// The ledger's condition, as the daemon reports it in `daemon.json` and
/// `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Condition {
    pub ok: bool,
    /// What is wrong, naming the file.
    pub error: Option<String>,
    /// What to do about it.
    pub fix: Option<String>,
}

impl Condition {
    pub fn ok() -> Self {
        Condition {
            ok: true,
            error: None,
            fix: None,
        }
    }

    /// The condition a ledger error reveals.
    pub fn of(e: &super::LedgerError) -> Self {
        Condition {
            ok: false,
            error: Some(e.what()),
            fix: e.fix().map(str::to_owned),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_schema_is_what_the_migrations_make() {
        let mut conn = Connection::open_in_memory().expect("in-memory database");
        super::super::migrations::migrate(&mut conn).expect("migrate");
        let made = columns(&conn).expect("columns");
        let listed: Columns = super::super::migrations::TABLES
            .iter()
            .map(|(t, cols)| {
                (
                    t.to_string(),
                    cols.split_whitespace().map(String::from).collect(),
                )
            })
            .collect();
        assert_eq!(
            listed, made,
            "migrations::TABLES must list every table the migrations make, with all its columns"
        );
    }
}
