//! `history stats`: counts by outcome, success rate, median and p95
//! duration of a selection, overall and per group (project, prompt or
//! profile). Lifetime figures per project come from the tables the
//! schema's triggers keep (migration 4), windows and other groupings are
//! computed in SQL over the selected rows; never by loading every row.
//! The selection ([`Filter`]) and the row readers are `history.rs`'s.

use std::collections::BTreeMap;

use rusqlite::params_from_iter;
use rusqlite::types::Value;
use serde::Serialize;

use super::{Filter, count_column, ms_column};
use crate::{Ledger, LedgerError};

/// Counts and durations of a set of executions.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub total: u64,
    /// Every outcome the ledger knows, zero included.
    pub by_outcome: BTreeMap<String, u64>,
    /// success / (total - aborted - rejected); `None` when that is 0.
    pub success_rate: Option<f64>,
    /// Of the successes, those whose work is merged (by their publish or
    /// found merged later): the ledger's `published` table.
    pub merged: u64,
    /// Of the successes, those whose branch was deleted without being
    /// merged (their work is not in the target): the ledger's `published`
    /// table.
    pub branch_deleted: u64,
    /// Executions with a duration (the ones that started).
    pub with_duration: u64,
    pub median_duration_ms: Option<u64>,
    pub p95_duration_ms: Option<u64>,
}

/// Statistics of a selection and of each group of it.
#[derive(Debug, Clone, Serialize)]
pub struct Stats {
    pub overall: Summary,
    /// Per group ([`GroupBy`]: per project unless asked otherwise), sorted
    /// by its key.
    pub projects: BTreeMap<String, Summary>,
}

/// What `history stats` groups executions by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GroupBy {
    /// The prompt's project ("" for the top of the inbox).
    #[default]
    Project,
    /// The prompt: `project/name`, or `name` at the top of the inbox.
    Prompt,
    /// The profile it ran under ("" when the row names none).
    Profile,
}

impl GroupBy {
    /// The SQL expression of a row's group key.
    fn key_sql(self) -> &'static str {
        match self {
            GroupBy::Project => "project",
            GroupBy::Prompt => "CASE WHEN project = '' THEN name ELSE project || '/' || name END",
            GroupBy::Profile => "COALESCE(profile, '')",
        }
    }
}

impl Ledger {
    /// Counts by outcome, success rate, median and p95 duration of the
    /// executions matching `f` (its `project` and `since_ms`), overall and
    /// per project. Everything is read in one snapshot, so counts and
    /// durations agree while monitors keep adding rows.
    pub fn stats(&self, f: &Filter) -> Result<Stats, LedgerError> {
        self.stats_by(f, GroupBy::Project)
    }

    /// [`Ledger::stats`], grouped `by` project, prompt or profile. Only
    /// the lifetime statistics of projects are kept on insert; the other
    /// groupings read the selection's rows.
    pub fn stats_by(&self, f: &Filter, by: GroupBy) -> Result<Stats, LedgerError> {
        let snapshot = self.conn.unchecked_transaction().map_err(|e| self.err(e))?;
        let mut stats = if f.is_lifetime() && by == GroupBy::Project {
            self.kept_stats(f.project.as_deref())?
        } else {
            let mut stats = self.summaries(self.outcome_counts(f, by)?)?;
            self.window_percentiles(f, by, &mut stats)?;
            stats
        };
        for (project, n) in self.settled_counts(f, by.key_sql(), true)? {
            stats.overall.merged += n;
            if let Some(s) = stats.projects.get_mut(&project) {
                s.merged = n;
            }
        }
        for (project, n) in self.settled_counts(f, by.key_sql(), false)? {
            stats.overall.branch_deleted += n;
            if let Some(s) = stats.projects.get_mut(&project) {
                s.branch_deleted = n;
            }
        }
        snapshot.commit().map_err(|e| self.err(e))?;
        for s in std::iter::once(&mut stats.overall).chain(stats.projects.values_mut()) {
            s.success_rate = success_rate(s);
        }
        Ok(stats)
    }

    /// [`Stats`] with the counts of `(project, outcome, count, count with
    /// a duration)` groups filled in (rates and durations not yet).
    fn summaries(&self, groups: Vec<(String, String, u64, u64)>) -> Result<Stats, LedgerError> {
        let known = self.outcome_names()?;
        let mut projects: BTreeMap<String, Summary> = BTreeMap::new();
        for (project, outcome, count, timed) in groups {
            let s = projects.entry(project).or_insert_with(|| blank(&known));
            add_count(s, outcome, count, timed);
        }
        let mut overall = blank(&known);
        for s in projects.values() {
            merge(&mut overall, s);
        }
        Ok(Stats { overall, projects })
    }

    /// The outcome names the ledger knows (its `outcomes` table).
    pub(crate) fn outcome_names(&self) -> Result<Vec<String>, LedgerError> {
        self.read(|c| {
            let mut stmt = c.prepare("SELECT name FROM outcomes ORDER BY name")?;
            let rows = stmt.query_map([], |r| r.get(0))?;
            rows.collect()
        })
    }

    /// `(project, outcome, count, count with a duration)` per group of the
    /// executions matching `f`: a pass over its window of an index.
    fn outcome_counts(
        &self,
        f: &Filter,
        by: GroupBy,
    ) -> Result<Vec<(String, String, u64, u64)>, LedgerError> {
        let (where_sql, params) = f.where_sql(&[]);
        let sql = format!(
            "SELECT {} AS g, outcome, COUNT(*), COUNT(duration_ms) FROM {}{where_sql} \
             GROUP BY g, outcome",
            by.key_sql(),
            f.stats_source()
        );
        self.count_groups(&sql, params)
    }

    /// Rows of `(project, outcome, count, count with a duration)` from `sql`.
    fn count_groups(
        &self,
        sql: &str,
        params: Vec<Value>,
    ) -> Result<Vec<(String, String, u64, u64)>, LedgerError> {
        self.read(|c| {
            let mut stmt = c.prepare(sql)?;
            let rows = stmt.query_map(params_from_iter(params), |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    count_column(r, 2)?,
                    count_column(r, 3)?,
                ))
            })?;
            rows.collect()
        })
    }

    /// Lifetime statistics of one project (or all) from the tables the
    /// triggers on `executions` keep (migration 4): a row per project and
    /// outcome, a row per project and duration bucket, then for each
    /// percentile the distinct durations of one bucket, from its nearer end.
    fn kept_stats(&self, project: Option<&str>) -> Result<Stats, LedgerError> {
        let (scope, params) = project_scope(project);
        let sql = format!("SELECT project, outcome, n, timed FROM stats_counts{scope}");
        let mut stats = self.summaries(self.count_groups(&sql, params)?)?;
        let histograms = self.histograms(project)?;
        for (name, s) in stats.projects.iter_mut() {
            if let Some(h) = histograms.get(name) {
                self.fill_percentiles(s, Some(name), h)?;
            }
        }
        // With `project` set, `histograms` holds that project alone.
        let all = Histogram::merged(histograms.values());
        self.fill_percentiles(&mut stats.overall, project, &all)?;
        Ok(stats)
    }

    /// The duration histogram of each project (or of `project` alone).
    fn histograms(
        &self,
        project: Option<&str>,
    ) -> Result<BTreeMap<String, Histogram>, LedgerError> {
        let (scope, params) = project_scope(project);
        let sql =
            format!("SELECT project, bucket, n FROM stats_buckets{scope} ORDER BY project, bucket");
        self.read(|c| {
            let mut stmt = c.prepare(&sql)?;
            let mut rows = stmt.query(params_from_iter(params))?;
            let mut out: BTreeMap<String, Histogram> = BTreeMap::new();
            while let Some(r) = rows.next()? {
                let name: String = r.get(0)?;
                let bucket = (r.get(1)?, count_column(r, 2)?);
                out.entry(name).or_default().0.push(bucket);
            }
            Ok(out)
        })
    }

    /// The median and p95 of `s` (whose durations `h` counts), exact.
    fn fill_percentiles(
        &self,
        s: &mut Summary,
        project: Option<&str>,
        h: &Histogram,
    ) -> Result<(), LedgerError> {
        let n = s.with_duration;
        let at = |pct| match h.locate(nearest_rank(pct, n)) {
            Some(spot) if n > 0 => self.duration_in_bucket(project, spot),
            _ => Ok(None),
        };
        s.median_duration_ms = at(50)?;
        s.p95_duration_ms = at(95)?;
        Ok(())
    }

    /// The duration at `spot` among those of `project` (or of all): the
    /// counts of the distinct durations in its bucket are added up from
    /// the bucket's nearer end until they pass the spot, so at most half
    /// of them are read.
    fn duration_in_bucket(
        &self,
        project: Option<&str>,
        spot: Spot,
    ) -> Result<Option<u64>, LedgerError> {
        let (order, mut skip) = if spot.index < spot.count / 2 {
            ("ASC", spot.index)
        } else {
            ("DESC", spot.count - 1 - spot.index)
        };
        let (table, scope) = match project {
            Some(_) => ("stats_durations", "project = ?2 AND "),
            None => ("stats_durations_all", ""),
        };
        let sql = format!(
            "SELECT duration_ms, n FROM {table} \
             WHERE {scope}duration_ms BETWEEN ?1 AND (SELECT hi FROM duration_buckets WHERE lo = ?1) \
             ORDER BY duration_ms {order}"
        );
        let mut params = vec![Value::Integer(spot.bucket)];
        params.extend(project.map(|p| Value::Text(p.to_owned())));
        self.read(|c| {
            let mut stmt = c.prepare_cached(&sql)?;
            let mut rows = stmt.query(params_from_iter(params))?;
            while let Some(r) = rows.next()? {
                let n = count_column(r, 1)?;
                if skip < n {
                    return ms_column(r, 0);
                }
                skip -= n;
            }
            Ok(None)
        })
    }

    /// Percentiles of a `--since` window: the window is sorted once by
    /// SQLite (window functions) for all projects and once overall, instead
    /// of one pass over the window per project and percentile.
    fn window_percentiles(
        &self,
        f: &Filter,
        by: GroupBy,
        stats: &mut Stats,
    ) -> Result<(), LedgerError> {
        for (project, rank, n, ms) in self.ranked_durations(f, by.key_sql())? {
            if let Some(s) = stats.projects.get_mut(&project) {
                place(s, rank, n, ms);
            }
        }
        for (_, rank, n, ms) in self.ranked_durations(f, "''")? {
            place(&mut stats.overall, rank, n, ms);
        }
        Ok(())
    }

    /// `(project, rank, n, duration)` of the median and p95 rows of each
    /// `partition` (a column, or `NULL` for one partition) of the window.
    fn ranked_durations(
        &self,
        f: &Filter,
        partition: &str,
    ) -> Result<Vec<(String, u64, u64, u64)>, LedgerError> {
        let (where_sql, params) = f.where_sql(&["duration_ms IS NOT NULL"]);
        let sql = format!(
            "SELECT g, rn, n, duration_ms FROM (
                 SELECT {partition} AS g, duration_ms,
                        ROW_NUMBER() OVER (PARTITION BY {partition} ORDER BY duration_ms) AS rn,
                        COUNT(*) OVER (PARTITION BY {partition}) AS n
                 FROM {}{where_sql})
             WHERE rn = MAX(1, (n * 50 + 99) / 100) OR rn = MAX(1, (n * 95 + 99) / 100)",
            f.stats_source()
        );
        self.read(|c| {
            let mut stmt = c.prepare(&sql)?;
            let rows = stmt.query_map(params_from_iter(params), |r| {
                let ms = ms_column(r, 3)?.unwrap_or(0);
                Ok((r.get(0)?, count_column(r, 1)?, count_column(r, 2)?, ms))
            })?;
            rows.collect()
        })
    }
}

/// success / (total - aborted - rejected - cancelled): those runs say
/// nothing about whether the job works. `None` when nothing is left.
fn success_rate(s: &Summary) -> Option<f64> {
    let count = |o: &str| s.by_outcome.get(o).copied().unwrap_or(0);
    let decided = s.total - count("aborted") - count("rejected") - count("cancelled");
    (decided > 0).then(|| count("success") as f64 / decided as f64)
}

/// The nearest-rank position (1-based) of percentile `pct` among `n`
/// sorted values: ceil(pct * n / 100), at least 1. No interpolation, so
/// the result is always a duration that occurred. Kept equal to the
/// expression in [`Ledger::ranked_durations`].
pub(super) fn nearest_rank(pct: u64, n: u64) -> u64 {
    (pct * n).div_ceil(100).max(1)
}

/// Record a ranked duration as `s`'s median and/or p95.
fn place(s: &mut Summary, rank: u64, n: u64, ms: u64) {
    if rank == nearest_rank(50, n) {
        s.median_duration_ms = Some(ms);
    }
    if rank == nearest_rank(95, n) {
        s.p95_duration_ms = Some(ms);
    }
}

/// ` WHERE project = ?` (or nothing) and its parameter.
fn project_scope(project: Option<&str>) -> (&'static str, Vec<Value>) {
    match project {
        Some(p) => (" WHERE project = ?", vec![Value::Text(p.to_owned())]),
        None => ("", Vec::new()),
    }
}

/// How many durations of a project (or of all) fall in each bucket:
/// `(bucket, count)`, buckets (their smallest duration) ascending, empty
/// ones left out.
#[derive(Debug, Default)]
struct Histogram(Vec<(i64, u64)>);

/// Where a ranked duration lies: its bucket, how many durations the bucket
/// holds, and its 0-based position among them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Spot {
    bucket: i64,
    count: u64,
    index: u64,
}

impl Histogram {
    /// The sum of `all`, bucket by bucket.
    fn merged<'a>(all: impl Iterator<Item = &'a Histogram>) -> Histogram {
        let mut sum: BTreeMap<i64, u64> = BTreeMap::new();
        for &(bucket, n) in all.flat_map(|h| &h.0) {
            *sum.entry(bucket).or_insert(0) += n;
        }
        Histogram(sum.into_iter().collect())
    }

    /// Where the `rank`th smallest duration (1-based) lies; `None` past
    /// the last one.
    fn locate(&self, rank: u64) -> Option<Spot> {
        let mut below = 0;
        for &(bucket, count) in &self.0 {
            if rank <= below + count {
                let index = rank.checked_sub(below + 1)?;
                return Some(Spot {
                    bucket,
                    count,
                    index,
                });
            }
            below += count;
        }
        None
    }
}

/// A summary with every known outcome at zero.
fn blank(known: &[String]) -> Summary {
    Summary {
        by_outcome: known.iter().map(|o| (o.clone(), 0)).collect(),
        ..Summary::default()
    }
}

fn add_count(s: &mut Summary, outcome: String, count: u64, timed: u64) {
    s.total += count;
    s.with_duration += timed;
    *s.by_outcome.entry(outcome).or_insert(0) += count;
}

fn merge(into: &mut Summary, from: &Summary) {
    for (outcome, count) in &from.by_outcome {
        *into.by_outcome.entry(outcome.clone()).or_insert(0) += count;
    }
    into.total += from.total;
    into.with_duration += from.with_duration;
}
