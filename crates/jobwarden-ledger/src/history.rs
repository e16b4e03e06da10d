//! Read queries behind `jobwarden history list|show|stats|export|who-touched`:
//! filtered listings (by the prompt's kept text too), one execution with
//! its artifacts and paths, a row-by-row stream for exports, the newest
//! runs of each prompt, and path lookups; the statistics are
//! `history/stats.rs`'s.
//!
//! Rows come back as [`Execution`]s and small plain structs; how they are
//! printed is left to `commands/history`. Decision-driving reads (cooldown,
//! attempts) live in `query.rs`.

use rusqlite::types::{Type, Value};
use rusqlite::{OptionalExtension, Row, params_from_iter};
use serde::Serialize;

use super::{Execution, Ledger, LedgerError, Outcome, Source};

mod stats;
pub use stats::{GroupBy, Stats, Summary};

/// The `executions` columns in the order [`execution_from_row`] reads them.
pub(super) const COLUMNS: &str = "id, project, name, attempt, retry_of, profile, command, workdir, \
     started_at, finished_at, duration_ms, outcome, exit_code, signal, failure_stage, \
     error_message, result_ref, host, prompt_sha256, disposition, source";

/// How many names [`COLUMNS`] holds: the index of the first column after them.
const COLUMN_COUNT: usize = 21;

/// Which executions a query wants; every field set narrows it (they combine).
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub project: Option<String>,
    pub name: Option<String>,
    pub outcome: Option<Outcome>,
    /// Only executions that finished at or after this (epoch ms).
    pub since_ms: Option<u64>,
    /// Only executions that finished before this (epoch ms).
    pub until_ms: Option<u64>,
    /// Only executions whose kept prompt text holds this, case ignored
    /// (`history list --grep`; rows without a kept text never match).
    pub grep: Option<String>,
}

impl Filter {
    /// Does this select the whole history of one project or of all, which
    /// the statistics kept on insert answer without reading executions?
    fn is_lifetime(&self) -> bool {
        self.since_ms.is_none()
            && self.until_ms.is_none()
            && self.name.is_none()
            && self.outcome.is_none()
            && self.grep.is_none()
    }

    /// The SQL conditions this filter sets, with their parameters.
    fn conditions(&self) -> Vec<(&'static str, Value)> {
        let text = |v: &Option<String>| v.clone().map(Value::Text);
        [
            ("project = ?", text(&self.project)),
            ("name = ?", text(&self.name)),
            (
                "outcome = ?",
                self.outcome.map(|o| Value::Text(o.as_str().into())),
            ),
            (
                "finished_at >= ?",
                self.since_ms.map(|ms| Value::Integer(to_sql_int(ms))),
            ),
            (
                "finished_at < ?",
                self.until_ms.map(|ms| Value::Integer(to_sql_int(ms))),
            ),
        ]
        .into_iter()
        .filter_map(|(sql, v)| v.map(|v| (sql, v)))
        .collect()
    }

    /// The table clause of a statistics query. A `--since`/`--until` window is read
    /// through the finished_at index: without table statistics SQLite
    /// prefers the project indexes and then reads a table row per entry
    /// to test finished_at, which over a million rows takes seconds.
    fn stats_source(&self) -> &'static str {
        if self.since_ms.is_some() || self.until_ms.is_some() {
            "executions INDEXED BY executions_by_finished"
        } else {
            "executions"
        }
    }

    /// ` WHERE …` (or nothing) and its parameters, plus `extra` conditions.
    pub(super) fn where_sql(&self, extra: &[&str]) -> (String, Vec<Value>) {
        let (mut conds, params): (Vec<&str>, Vec<Value>) = self.conditions().into_iter().unzip();
        conds.extend_from_slice(extra);
        if conds.is_empty() {
            return (String::new(), params);
        }
        (format!(" WHERE {}", conds.join(" AND ")), params)
    }
}

/// A stored artifact: its kind and its JSON envelope
/// (`{"text": ..., "truncated": bool, "bytes": n}`) as stored.
#[derive(Debug, Clone, Serialize)]
pub struct StoredArtifact {
    pub kind: String,
    pub content: serde_json::Value,
}

/// A path an execution ran on (`executed_on`) or changed (`affected`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoredPath {
    pub relation: String,
    pub path: String,
}

/// One execution of a prompt, as the night-watch export wants it.
#[derive(Debug, Clone)]
pub struct PromptRun {
    pub project: String,
    pub name: String,
    pub finished_at: u64,
    pub outcome: String,
    pub exit_code: Option<i32>,
    pub attempt: u32,
}

/// An execution that touched a path, with the matching path rows.
#[derive(Debug, Clone)]
pub struct Touch {
    pub execution: Execution,
    pub paths: Vec<StoredPath>,
}

impl Ledger {
    /// Run `f` on the connection, its error naming the ledger file.
    pub(super) fn read<T>(
        &self,
        f: impl FnOnce(&rusqlite::Connection) -> rusqlite::Result<T>,
    ) -> Result<T, LedgerError> {
        f(&self.conn).map_err(|e| self.err(e))
    }

    /// Executions matching `f`, newest first, at most `limit`. Newest is
    /// the ledger's order, the order rows were written (`rowid`), which a
    /// wall clock stepped back does not change (see [`crate::execution`]).
    pub fn list(&self, f: &Filter, limit: u32) -> Result<Vec<Execution>, LedgerError> {
        if let Some(needle) = &f.grep {
            return Ok(self.list_grep(f, &needle.to_lowercase(), limit, false)?.0);
        }
        let (where_sql, mut params) = f.where_sql(&[]);
        let sql = format!(
            "SELECT {COLUMNS} FROM executions{where_sql} \
             ORDER BY rowid DESC LIMIT ?"
        );
        params.push(Value::Integer(i64::from(limit)));
        self.read(|c| {
            let mut stmt = c.prepare(&sql)?;
            let rows = stmt.query_map(params_from_iter(params), execution_from_row)?;
            rows.collect()
        })
    }

    /// [`Ledger::list`], and how many executions `f` selects in all
    /// (counted only when `limit` of them were listed).
    pub fn list_counted(
        &self,
        f: &Filter,
        limit: u32,
    ) -> Result<(Vec<Execution>, u64), LedgerError> {
        if let Some(needle) = &f.grep {
            // Only the texts themselves can say: one walk lists and counts.
            return self.list_grep(f, &needle.to_lowercase(), limit, true);
        }
        let rows = self.list(f, limit)?;
        if rows.len() < limit as usize {
            let n = rows.len() as u64;
            return Ok((rows, n));
        }
        let (where_sql, params) = f.where_sql(&[]);
        let sql = format!("SELECT count(*) FROM executions{where_sql}");
        let total =
            self.read(|c| c.query_row(&sql, params_from_iter(params), |r| r.get::<_, i64>(0)))?;
        Ok((rows, total.max(0) as u64))
    }

    /// [`Ledger::list`] of the executions whose kept prompt text holds
    /// `needle` (lower-cased): the rows with a text are walked newest
    /// first, each text inflated and searched, until `limit` matched, or
    /// with `count_all` to the end; and how many matched.
    fn list_grep(
        &self,
        f: &Filter,
        needle: &str,
        limit: u32,
        count_all: bool,
    ) -> Result<(Vec<Execution>, u64), LedgerError> {
        let (conds, params): (Vec<String>, Vec<Value>) = f
            .conditions()
            .into_iter()
            .map(|(sql, v)| (format!(" AND e.{sql}"), v))
            .unzip();
        let sql = format!(
            "SELECT {}, p.text FROM executions e JOIN execution_prompts p ON p.execution_id = e.id \
             WHERE 1{} ORDER BY e.rowid DESC",
            prefixed_columns("e"),
            conds.concat()
        );
        self.read(|c| {
            let mut stmt = c.prepare(&sql)?;
            let mut rows = stmt.query(params_from_iter(params))?;
            let mut out = Vec::new();
            let mut matched = 0u64;
            while count_all || out.len() < limit as usize {
                let Some(r) = rows.next()? else { break };
                let packed = super::prompt_text::packed_of(r.get_ref(COLUMN_COUNT)?);
                if super::prompt_text::packed_holds(packed, needle) {
                    matched += 1;
                    if out.len() < limit as usize {
                        out.push(execution_from_row(r)?);
                    }
                }
            }
            Ok((out, matched))
        })
    }

    /// The execution with this id, if the ledger has it.
    pub fn execution(&self, id: &str) -> Result<Option<Execution>, LedgerError> {
        let sql = format!("SELECT {COLUMNS} FROM executions WHERE id = ?1");
        self.conn
            .query_row(&sql, [id], execution_from_row)
            .optional()
            .map_err(|e| self.err(e))
    }

    /// The artifacts of execution `id`, by kind.
    pub fn artifacts(&self, id: &str) -> Result<Vec<StoredArtifact>, LedgerError> {
        self.read(|c| {
            let mut stmt = c.prepare(
                "SELECT kind, content FROM execution_artifacts WHERE execution_id = ?1 ORDER BY kind",
            )?;
            let rows = stmt.query_map([id], |r| {
                Ok(StoredArtifact {
                    kind: r.get(0)?,
                    content: json_column(r, 1)?,
                })
            })?;
            rows.collect()
        })
    }

    /// The paths of execution `id`, by relation then path.
    pub fn paths(&self, id: &str) -> Result<Vec<StoredPath>, LedgerError> {
        self.read(|c| {
            let mut stmt = c.prepare(
                "SELECT relation, path FROM execution_paths WHERE execution_id = ?1 \
                 ORDER BY relation, path",
            )?;
            let rows = stmt.query_map([id], path_from_row)?;
            rows.collect()
        })
    }

    /// Every execution, oldest first, handed to `f` one at a time: an
    /// export of a million rows never holds more than one in memory.
    pub fn each_execution<E: From<LedgerError>>(
        &self,
        mut f: impl FnMut(Execution) -> Result<(), E>,
    ) -> Result<(), E> {
        let sql = format!("SELECT {COLUMNS} FROM executions ORDER BY rowid");
        let mut stmt = self.conn.prepare(&sql).map_err(|e| self.err(e))?;
        let mut rows = stmt.query([]).map_err(|e| self.err(e))?;
        while let Some(row) = rows.next().map_err(|e| self.err(e))? {
            f(execution_from_row(row).map_err(|e| self.err(e))?)?;
        }
        Ok(())
    }

    /// The newest `n` executions of every prompt, ordered by project, name,
    /// then oldest to newest.
    pub fn newest_per_prompt(&self, n: u32) -> Result<Vec<PromptRun>, LedgerError> {
        self.read(|c| {
            let mut stmt = c.prepare(
                "SELECT project, name, finished_at, outcome, exit_code, attempt FROM (
                     SELECT project, name, finished_at, outcome, exit_code, attempt, rowid AS rid,
                            ROW_NUMBER() OVER (PARTITION BY project, name
                                               ORDER BY rowid DESC) AS rn
                     FROM executions)
                 WHERE rn <= ?1 ORDER BY project, name, rid",
            )?;
            let rows = stmt.query_map([n], prompt_run_from_row)?;
            rows.collect()
        })
    }

    /// Executions with a path row for `path` itself or for anything under
    /// it (when it is a folder), newest first. `path` is absolute and has
    /// no trailing `/` (except the root itself).
    pub fn touching(&self, path: &str) -> Result<Vec<Touch>, LedgerError> {
        let (lower, upper) = under_range(path);
        let sql = format!(
            "SELECT {}, p.relation, p.path FROM execution_paths p
             JOIN executions e ON e.id = p.execution_id
             WHERE p.path = ?1 OR (p.path >= ?2 AND p.path < ?3)
             ORDER BY e.rowid DESC, p.relation, p.path",
            prefixed_columns("e")
        );
        self.read(|c| {
            let mut stmt = c.prepare(&sql)?;
            let rows = stmt.query_map([path, &lower, &upper], |r| {
                Ok((execution_from_row(r)?, path_from_offset(r, COLUMN_COUNT)?))
            })?;
            rows.collect()
        })
        .map(group_touches)
    }
}

/// The half-open range `[P/, P0)` holding exactly the paths under folder
/// `P` ('0' is the byte after '/'), so no LIKE pattern needs escaping and
/// the path index serves it.
fn under_range(path: &str) -> (String, String) {
    let base = path.strip_suffix('/').unwrap_or(path);
    (format!("{base}/"), format!("{base}0"))
}

/// [`COLUMNS`] with each name qualified by table alias `alias`.
pub(super) fn prefixed_columns(alias: &str) -> String {
    COLUMNS
        .split(", ")
        .map(|c| format!("{alias}.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Consecutive rows of the same execution become one [`Touch`].
fn group_touches(rows: Vec<(Execution, StoredPath)>) -> Vec<Touch> {
    let mut out: Vec<Touch> = Vec::new();
    for (execution, path) in rows {
        match out.last_mut() {
            Some(t) if t.execution.id == execution.id => t.paths.push(path),
            _ => out.push(Touch {
                execution,
                paths: vec![path],
            }),
        }
    }
    out
}

/// An [`Execution`] from a row selecting [`COLUMNS`] first.
pub(super) fn execution_from_row(r: &Row<'_>) -> rusqlite::Result<Execution> {
    Ok(Execution {
        id: r.get(0)?,
        project: r.get(1)?,
        name: r.get(2)?,
        attempt: r.get(3)?,
        retry_of: r.get(4)?,
        profile: r.get(5)?,
        command: r
            .get::<_, Option<String>>(6)?
            .map(|t| parse_json(6, &t))
            .transpose()?,
        workdir: r.get(7)?,
        started_at: ms_column(r, 8)?,
        finished_at: ms_column(r, 9)?.unwrap_or(0),
        duration_ms: ms_column(r, 10)?,
        outcome: parse_text(r, 11, |s| s.parse::<Outcome>())?,
        exit_code: r.get(12)?,
        signal: r.get(13)?,
        failure_stage: r.get(14)?,
        error_message: r.get(15)?,
        result_ref: r.get(16)?,
        host: r.get(17)?,
        prompt_sha256: r.get(18)?,
        disposition: r.get(19)?,
        source: parse_text(r, 20, |s| s.parse::<Source>())?,
        published: None,
        slurm: None,
        prompt: None,
    })
}

fn prompt_run_from_row(r: &Row<'_>) -> rusqlite::Result<PromptRun> {
    Ok(PromptRun {
        project: r.get(0)?,
        name: r.get(1)?,
        finished_at: ms_column(r, 2)?.unwrap_or(0),
        outcome: r.get(3)?,
        exit_code: r.get(4)?,
        attempt: r.get(5)?,
    })
}

fn path_from_row(r: &Row<'_>) -> rusqlite::Result<StoredPath> {
    path_from_offset(r, 0)
}

fn path_from_offset(r: &Row<'_>, i: usize) -> rusqlite::Result<StoredPath> {
    Ok(StoredPath {
        relation: r.get(i)?,
        path: r.get(i + 1)?,
    })
}

/// A text column parsed by `parse`, its error naming the value.
fn parse_text<T>(
    r: &Row<'_>,
    i: usize,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> rusqlite::Result<T> {
    let text: String = r.get(i)?;
    parse(&text).map_err(|m| rusqlite::Error::FromSqlConversionFailure(i, Type::Text, m.into()))
}

/// A JSON text column.
fn json_column<T: serde::de::DeserializeOwned>(r: &Row<'_>, i: usize) -> rusqlite::Result<T> {
    let text: String = r.get(i)?;
    parse_json(i, &text)
}

fn parse_json<T: serde::de::DeserializeOwned>(i: usize, text: &str) -> rusqlite::Result<T> {
    serde_json::from_str(text)
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(i, Type::Text, Box::new(e)))
}

/// An epoch-ms or duration column; negative values (which no writer
/// produces) read as 0 rather than wrapping.
fn ms_column(r: &Row<'_>, i: usize) -> rusqlite::Result<Option<u64>> {
    Ok(r.get::<_, Option<i64>>(i)?.map(|v| v.max(0) as u64))
}

fn count_column(r: &Row<'_>, i: usize) -> rusqlite::Result<u64> {
    Ok(r.get::<_, i64>(i)?.max(0) as u64)
}

/// SQLite integers are i64; times and counts this large do not occur, and
/// saturate rather than wrap if they did.
fn to_sql_int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::stats::nearest_rank;
    use super::*;
    use crate::PathRelation;

    fn exec(
        id: &str,
        project: &str,
        outcome: Outcome,
        finished_at: u64,
        ms: Option<u64>,
    ) -> Execution {
        let finished_at = crate::T0 + finished_at;
        let mut e = Execution::new(
            id.into(),
            project,
            "n",
            outcome,
            finished_at,
            "h",
            Source::Daemon,
        );
        e.command = Some(vec!["sh".into(), "-c".into()]);
        e.started_at = ms.map(|d| finished_at - d);
        e.duration_ms = ms;
        e
    }

    /// A ledger holding project "a" with durations 1..=20 s (finished at
    /// 100_000 + i) and project "b" with one aborted run without a duration.
    fn seeded() -> (tempfile::TempDir, Ledger) {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut l = Ledger::open(&dir.path().join("ledger.db")).expect("open");
        for i in 1..=20u64 {
            let outcome = if i % 4 == 0 {
                Outcome::Failure
            } else {
                Outcome::Success
            };
            let e = exec(&format!("a{i}"), "a", outcome, 100_000 + i, Some(i * 1000));
            l.record(&e, &[], &[]).expect("record");
        }
        l.record(&exec("b1", "b", Outcome::Aborted, 500_000, None), &[], &[])
            .expect("record");
        (dir, l)
    }

    #[test]
    fn column_count_matches_the_column_list() {
        assert_eq!(COLUMNS.split(',').count(), COLUMN_COUNT);
    }

    #[test]
    fn nearest_rank_percentiles() {
        assert_eq!(nearest_rank(50, 1), 1);
        assert_eq!(nearest_rank(95, 1), 1);
        assert_eq!(nearest_rank(50, 4), 2);
        assert_eq!(nearest_rank(50, 5), 3);
        assert_eq!(nearest_rank(95, 20), 19);
        assert_eq!(nearest_rank(95, 21), 20);
    }

    #[test]
    fn stats_count_rate_and_percentiles_per_project() {
        let (_dir, l) = seeded();
        let s = l.stats(&Filter::default()).expect("stats");
        assert_eq!(s.overall.total, 21);
        assert_eq!(s.overall.by_outcome["success"], 15);
        assert_eq!(s.overall.by_outcome["timeout"], 0);
        assert_eq!(
            s.overall.success_rate,
            Some(15.0 / 20.0),
            "aborted left out"
        );
        assert_eq!(s.overall.with_duration, 20);
        assert_eq!(s.overall.median_duration_ms, Some(10_000));
        assert_eq!(s.overall.p95_duration_ms, Some(19_000));
        let b = &s.projects["b"];
        assert_eq!(
            (b.total, b.success_rate, b.median_duration_ms),
            (1, None, None)
        );
    }

    #[test]
    fn since_window_path_agrees_with_the_lifetime_path() {
        let (_dir, l) = seeded();
        let lifetime = l.stats(&Filter::default()).expect("lifetime");
        let all = Filter {
            since_ms: Some(0),
            ..Filter::default()
        };
        let window = l.stats(&all).expect("window");
        let key = |s: &Stats| serde_json::to_value(s).expect("serialise");
        assert_eq!(key(&lifetime), key(&window));
        let late = Filter {
            since_ms: Some(crate::T0 + 100_011),
            ..Filter::default()
        };
        let s = l.stats(&late).expect("late window");
        assert_eq!(s.overall.total, 11, "a11..a20 and b1");
        assert_eq!(s.projects["a"].median_duration_ms, Some(15_000));
        let early = Filter {
            until_ms: Some(crate::T0 + 100_011),
            ..Filter::default()
        };
        let s = l.stats(&early).expect("early window");
        assert_eq!(
            s.overall.total + 11,
            lifetime.overall.total,
            "until excludes exactly what since includes"
        );
    }

    #[test]
    fn list_filters_and_orders_newest_first() {
        let (_dir, l) = seeded();
        let f = Filter {
            project: Some("a".into()),
            outcome: Some(Outcome::Failure),
            ..Filter::default()
        };
        let rows = l.list(&f, 2).expect("list");
        let ids: Vec<&str> = rows.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["a20", "a16"]);
        assert_eq!(
            rows[0].command.as_deref(),
            Some(&["sh".to_string(), "-c".into()][..])
        );
    }

    #[test]
    fn newest_per_prompt_keeps_n_oldest_first() {
        let (_dir, l) = seeded();
        let runs = l.newest_per_prompt(3).expect("runs");
        let a: Vec<u64> = runs
            .iter()
            .filter(|r| r.project == "a")
            .map(|r| r.finished_at)
            .collect();
        assert_eq!(a, [100_018, 100_019, 100_020].map(|t| crate::T0 + t));
    }

    #[test]
    fn touching_matches_the_path_and_its_folder_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut l = Ledger::open(&dir.path().join("ledger.db")).expect("open");
        let paths = [
            (PathRelation::Affected, "/w/src/a.rs".to_string()),
            (PathRelation::Affected, "/w/src_old/b.rs".into()),
            (PathRelation::ExecutedOn, "/w".into()),
        ];
        l.record(&exec("x", "p", Outcome::Success, 1, None), &[], &paths)
            .expect("record");
        let hits = |p: &str| {
            l.touching(p)
                .expect("query")
                .first()
                .map_or(0, |t| t.paths.len())
        };
        assert_eq!(hits("/w/src"), 1, "not /w/src_old");
        assert_eq!(hits("/w/src/a.rs"), 1);
        assert_eq!(hits("/w"), 3);
        assert_eq!(hits("/"), 3);
        assert_eq!(hits("/w/sr"), 0);
        assert_eq!(hits("/w/src_"), 0);
    }
}
