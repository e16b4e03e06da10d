//! What `jobwarden metrics` reads from the ledger: the counters migration
//! 10 keeps, the duration buckets migration 4 keeps, the job index's
//! counts. A handful of small reads, whatever the history's size.

use super::{Ledger, LedgerError};

/// One cumulative bucket of a histogram: how many took at most `le_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bucket {
    pub le_ms: u64,
    pub count: u64,
}

/// A project's execution durations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Durations {
    pub project: String,
    /// Cumulative, one per bound asked for.
    pub buckets: Vec<Bucket>,
    pub count: u64,
    pub sum_ms: u64,
}

impl Ledger {
    /// Executions by `(project, profile, outcome)`; profile "" for none.
    pub fn metric_counts(&self) -> Result<Vec<(String, String, String, u64)>, LedgerError> {
        self.read(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT project, profile, outcome, n FROM metric_counts ORDER BY 1, 2, 3",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get::<_, i64>(3)?.max(0) as u64,
                ))
            })?;
            rows.collect()
        })
    }

    /// Jobs not ended yet, by project (claimed, not yet an execution).
    pub fn live_jobs_by_project(&self) -> Result<Vec<(String, u64)>, LedgerError> {
        let live = super::jobs::unended_states();
        let marks = vec!["?"; live.len()].join(", ");
        let sql = format!(
            "SELECT project, COUNT(*) FROM jobs WHERE state IN ({marks}) GROUP BY project ORDER BY project"
        );
        self.read(|c| {
            let mut stmt = c.prepare(&sql)?;
            let rows = stmt.query_map(rusqlite::params_from_iter(live.iter()), |r| {
                Ok((r.get(0)?, r.get::<_, i64>(1)?.max(0) as u64))
            })?;
            rows.collect()
        })
    }

    /// Each project's durations against the bounds `le_ms` (ascending): the
    /// kept buckets (about 6 % wide) below each bound, and the exact
    /// durations of the one bucket a bound falls inside.
    pub fn duration_histograms(&self, le_ms: &[u64]) -> Result<Vec<Durations>, LedgerError> {
        self.read(|c| {
            let mut projects: Vec<Durations> = {
                let mut stmt = c.prepare(
                    "SELECT s.project, s.timed, COALESCE(m.sum_ms, 0)
                     FROM (SELECT project, SUM(timed) AS timed FROM stats_counts GROUP BY project) s
                     LEFT JOIN metric_duration_sums m ON m.project = s.project
                     WHERE s.timed > 0 ORDER BY s.project",
                )?;
                let rows = stmt.query_map([], |r| {
                    Ok(Durations {
                        project: r.get(0)?,
                        buckets: Vec::new(),
                        count: r.get::<_, i64>(1)?.max(0) as u64,
                        sum_ms: r.get::<_, i64>(2)?.max(0) as u64,
                    })
                })?;
                rows.collect::<rusqlite::Result<_>>()?
            };
            let mut whole = c.prepare_cached(
                "SELECT COALESCE(SUM(b.n), 0) FROM stats_buckets b
                 JOIN duration_buckets d ON d.lo = b.bucket
                 WHERE b.project = ?1 AND d.hi <= ?2",
            )?;
            let mut part = c.prepare_cached(
                "SELECT COALESCE(SUM(n), 0) FROM stats_durations
                 WHERE project = ?1 AND duration_ms >= ?2 AND duration_ms <= ?3",
            )?;
            let mut straddled = c.prepare_cached(
                "SELECT lo, hi FROM duration_buckets WHERE lo <= ?1 ORDER BY lo DESC LIMIT 1",
            )?;
            for p in &mut projects {
                for &le in le_ms {
                    let le_sql = le.min(i64::MAX as u64) as i64;
                    let below: i64 =
                        whole.query_row(rusqlite::params![p.project, le_sql], |r| r.get(0))?;
                    let (lo, hi): (i64, i64) =
                        straddled.query_row([le_sql], |r| Ok((r.get(0)?, r.get(1)?)))?;
                    let inside: i64 = if hi > le_sql {
                        part.query_row(rusqlite::params![p.project, lo, le_sql], |r| r.get(0))?
                    } else {
                        0
                    };
                    p.buckets.push(Bucket {
                        le_ms: le,
                        count: (below + inside).max(0) as u64,
                    });
                }
            }
            Ok(projects)
        })
    }
}
