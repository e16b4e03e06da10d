//! The ledger against real SQLite files in temporary folders.

use super::*;
use jobwarden_model::job::{JobId, JobRecord, JobState};
use jobwarden_model::layout::PromptName;

fn execution(project: &str, name: &str, outcome: Outcome, finished_at: u64) -> Execution {
    let prompt = PromptName {
        project: project.into(),
        name: name.into(),
    };
    let mut rec = JobRecord::new_queued(
        JobId::generate(),
        &prompt,
        "inbox/x.running.md".into(),
        "host",
    );
    rec.state = JobState::Failed;
    let mut e = Execution::from_record(&rec, outcome, Some("archived"), Source::Daemon);
    e.finished_at = T0 + finished_at;
    e
}

#[test]
fn migrates_from_empty_and_reopens_idempotently() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ledger.db");
    let mut l = Ledger::open(&path).expect("open");
    l.record(&execution("p", "n", Outcome::Success, 1), &[], &[])
        .expect("record");
    drop(l);
    let l = Ledger::open(&path).expect("reopen");
    let v: u32 = l
        .conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("version");
    assert_eq!(v, SCHEMA_VERSION);
    assert!(
        l.last_run("p", "n").expect("query").is_some(),
        "data kept across reopen"
    );
    let mode: String = l
        .conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .expect("mode");
    assert_eq!(mode, "wal");
}

#[test]
fn refuses_a_schema_from_the_future() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ledger.db");
    drop(Ledger::open(&path).expect("open"));
    rusqlite::Connection::open(&path)
        .and_then(|c| c.pragma_update(None, "user_version", SCHEMA_VERSION + 1))
        .expect("bump version");
    let err = Ledger::open(&path).err().expect("too new");
    assert!(err.to_string().contains("upgrade jobwarden"), "{err}");
}

#[test]
fn rows_are_append_only_and_inserts_idempotent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut l = Ledger::open(&dir.path().join("ledger.db")).expect("open");
    let e = execution("p", "n", Outcome::Failure, 10);
    let tail = Artifact {
        kind: "stdout_tail",
        text: "out".into(),
        truncated: false,
        bytes: 3,
    };
    assert!(
        l.record(
            &e,
            std::slice::from_ref(&tail),
            &[(PathRelation::ExecutedOn, "/w".into())]
        )
        .expect("first")
    );
    assert!(!l.record(&e, &[tail], &[]).expect("second is a no-op"));
    assert!(
        l.conn
            .execute("UPDATE executions SET outcome = 'success'", [])
            .is_err()
    );
    assert!(l.conn.execute("DELETE FROM executions", []).is_err());
}

#[test]
fn unknown_outcome_is_refused_by_the_schema() {
    let dir = tempfile::tempdir().expect("tempdir");
    let l = Ledger::open(&dir.path().join("ledger.db")).expect("open");
    let r = l.conn.execute(
        "INSERT INTO executions (id, project, name, attempt, finished_at, outcome, host) VALUES ('x', 'p', 'n', 1, 1, 'bogus', 'h')",
        [],
    );
    assert!(r.is_err(), "foreign key on outcomes");
}

#[test]
fn cooldown_follows_the_last_outcome_per_prompt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut l = Ledger::open(&dir.path().join("ledger.db")).expect("open");
    let c = Cooldowns {
        failure: Duration::from_secs(100),
        rate_limited: Duration::from_secs(10),
    };
    l.record(&execution("a", "n", Outcome::Failure, 1_000), &[], &[])
        .expect("record");
    assert_eq!(
        l.cooldown_until("a", "n", c, T0 + 2_000).expect("q"),
        Some(T0 + 101_000)
    );
    assert_eq!(
        l.cooldown_until("a", "n", c, T0 + 101_000).expect("q"),
        None,
        "ends on time"
    );
    assert_eq!(
        l.cooldown_until("b", "n", c, T0 + 2_000).expect("q"),
        None,
        "projects are isolated"
    );
    l.record(&execution("a", "n", Outcome::RateLimited, 5_000), &[], &[])
        .expect("record");
    assert_eq!(
        l.cooldown_until("a", "n", c, T0 + 6_000).expect("q"),
        Some(T0 + 15_000)
    );
    l.record(&execution("a", "n", Outcome::Success, 7_000), &[], &[])
        .expect("record");
    assert_eq!(
        l.cooldown_until("a", "n", c, T0 + 7_001).expect("q"),
        None,
        "success clears it"
    );
}

#[test]
fn a_cancel_is_an_outcome_without_cooldown_and_a_counted_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut l = Ledger::open(&dir.path().join("ledger.db")).expect("open");
    let c = Cooldowns {
        failure: Duration::from_secs(100),
        rate_limited: Duration::from_secs(10),
    };
    l.record(&execution("a", "n", Outcome::Failure, 1_000), &[], &[])
        .expect("record");
    l.record(&execution("a", "n", Outcome::Cancelled, 2_000), &[], &[])
        .expect("a cancelled row");
    assert_eq!(
        l.cooldown_until("a", "n", c, T0 + 3_000).expect("q"),
        None,
        "a cancel ends the cooldown a failure started"
    );
    let cancelled = record(
        "cccc1111-0000-7000-8000-00000000beef",
        "a",
        "n",
        JobState::Cancelled,
        2_000,
    );
    l.index_job(&cancelled).expect("index");
    let counts = l.count_jobs_by_state().expect("counts");
    assert_eq!(counts, vec![("cancelled".to_owned(), 1)]);
}

#[test]
fn retry_chain_stops_at_the_row_that_archived() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut l = Ledger::open(&dir.path().join("ledger.db")).expect("open");
    let row = |outcome, at, disposition: &str| {
        let mut e = execution("p", "n", outcome, at);
        e.disposition = Some(disposition.to_owned());
        e
    };
    l.record(&row(Outcome::Interrupted, 1, "requeued"), &[], &[])
        .expect("r");
    l.record(&row(Outcome::Interrupted, 2, "archived"), &[], &[])
        .expect("r");
    assert!(
        l.retry_chain("p", "n").expect("q").is_empty(),
        "a fresh drop starts a new chain"
    );
    l.record(&row(Outcome::Failure, 3, "requeued"), &[], &[])
        .expect("r");
    l.record(&row(Outcome::Interrupted, 4, "requeued"), &[], &[])
        .expect("r");
    l.record(&row(Outcome::Interrupted, 5, "requeued"), &[], &[])
        .expect("r");
    let chain = l.retry_chain("p", "n").expect("q");
    assert_eq!(
        chain,
        vec![Outcome::Interrupted, Outcome::Interrupted, Outcome::Failure]
    );
}

fn record(id: &str, project: &str, name: &str, state: JobState, created: u64) -> JobRecord {
    let prompt = PromptName {
        project: project.into(),
        name: name.into(),
    };
    let mut rec = JobRecord::new_queued(
        JobId::parse(id).expect("id"),
        &prompt,
        "inbox/x.running.md".into(),
        "host",
    );
    rec.state = state;
    rec.created_at = jobwarden_sys::clock::Timestamp::from(
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(created),
    );
    rec.updated_at = rec.created_at;
    rec
}

#[test]
fn the_job_index_keeps_the_newest_snapshot_and_answers_lookups() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut l = Ledger::open(&dir.path().join("ledger.db")).expect("open");
    let a = record(
        "aaaa1111-0000-7000-8000-00000000beef",
        "p",
        "n",
        JobState::Queued,
        1_000,
    );
    let b = record(
        "aaaa2222-0000-7000-8000-00000000cafe",
        "p",
        "n",
        JobState::Queued,
        2_000,
    );
    l.index_job(&a).expect("index a");
    l.index_job(&b).expect("index b");
    let mut a_done = a.clone();
    a_done.state = JobState::Succeeded;
    a_done.updated_at = jobwarden_sys::clock::Timestamp::from(
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(5_000),
    );
    l.index_job(&a_done).expect("a ends");
    // A late, older snapshot (a daemon's start-up read) never wins.
    l.index_job(&a).expect("stale write");
    let got = l
        .indexed_job(a.job_id.as_str())
        .expect("read")
        .expect("row");
    assert_eq!(got.state, "succeeded");

    assert_eq!(l.jobs_with_prefix("aaaa", 10).expect("prefix").len(), 2);
    assert_eq!(l.jobs_with_prefix("aaaa1", 10).expect("prefix").len(), 1);
    let by_short = l.jobs_with_short_prefix("0000ca", 10).expect("short");
    assert_eq!(by_short.len(), 1);
    assert_eq!(by_short[0].id, b.job_id.as_str());
    let newest = l.newest_job_of("p", "n").expect("newest").expect("some");
    assert_eq!(newest.id, b.job_id.as_str());
    let counts = l.count_jobs_by_state().expect("counts");
    assert_eq!(counts, vec![("queued".into(), 1), ("succeeded".into(), 1)]);
    let filter = JobFilter {
        states: vec!["queued".into()],
        ..JobFilter::default()
    };
    let listed = l.list_jobs(&filter, 10).expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, b.job_id.as_str());

    // A job missing from the listing whose folder is still there (claimed
    // after the listing was taken) keeps its row.
    let kept = l
        .sync_job_index(&[IndexedJob::from_record(&a_done)], |_| false)
        .expect("sync");
    assert_eq!(kept, 0);
    assert!(l.indexed_job(b.job_id.as_str()).expect("read").is_some());
    // A queued job's row may precede its folder (the claim writes it
    // first): a sync never drops it.
    let kept = l
        .sync_job_index(&[IndexedJob::from_record(&a_done)], |_| true)
        .expect("sync");
    assert_eq!(kept, 0);
    assert_eq!(
        l.unended_job_ids().expect("unended"),
        vec![b.job_id.to_string()]
    );
    // `b` ended and its folder is gone: a sync drops its row.
    let mut b_done = b.clone();
    b_done.state = JobState::Succeeded;
    b_done.updated_at = a_done.updated_at;
    l.index_job(&b_done).expect("b ends");
    let gone = l
        .sync_job_index(&[IndexedJob::from_record(&a_done)], |_| true)
        .expect("sync");
    assert_eq!(gone, 1);
    assert!(l.unended_job_ids().expect("unended").is_empty());
    assert!(l.indexed_job(b.job_id.as_str()).expect("read").is_none());
    let counts = l.count_jobs_by_state().expect("counts");
    assert_eq!(
        counts,
        vec![("succeeded".into(), 1)],
        "counts follow deletes"
    );
}

#[test]
fn prompts_last_follows_each_prompts_newest_execution() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut l = Ledger::open(&dir.path().join("ledger.db")).expect("open");
    l.record(&execution("p", "n", Outcome::Failure, 10), &[], &[])
        .expect("record");
    assert_eq!(l.prompts_needing_attention(5).expect("q").len(), 1);
    l.record(&execution("p", "n", Outcome::Success, 20), &[], &[])
        .expect("record");
    assert!(l.prompts_needing_attention(5).expect("q").is_empty());
    // An older row recorded late (a backfill) does not take over.
    let mut backfilled = execution("p", "n", Outcome::Timeout, 15);
    backfilled.source = Source::Repair;
    l.record(&backfilled, &[], &[]).expect("record");
    assert!(l.prompts_needing_attention(5).expect("q").is_empty());
    // An end written after the wall clock stepped back is the newest.
    let stepped_back = execution("p", "n", Outcome::Failure, 12);
    l.record(&stepped_back, &[], &[]).expect("record");
    let attention = l.prompts_needing_attention(5).expect("q");
    assert_eq!(attention.len(), 1);
    assert_eq!(attention[0].job_id, stepped_back.id);
    let last = l.last_run("p", "n").expect("q").expect("a last run");
    assert_eq!(
        last.id, stepped_back.id,
        "the ledger's order, not the clock's"
    );
    let listed = l.list(&crate::history::Filter::default(), 1).expect("list");
    assert_eq!(listed[0].id, stepped_back.id);
    l.acknowledge(&stepped_back.id, crate::T0, None)
        .expect("ack");
    l.record(&execution("q", "m", Outcome::RateLimited, 30), &[], &[])
        .expect("record");
    let attention = l.prompts_needing_attention(5).expect("q");
    assert_eq!(attention.len(), 1);
    assert_eq!(
        (attention[0].project.as_str(), attention[0].outcome.as_str()),
        ("q", "rate_limited")
    );
    assert!(l.ever_ran().expect("ever"));
}

/// Insert `(id, project, outcome, duration_ms)` rows as writers do
/// (`INSERT OR IGNORE`, finished at their position), in one transaction.
/// Returns how many were new.
fn insert_rows(
    conn: &mut rusqlite::Connection,
    rows: &[(String, &str, &str, Option<i64>)],
) -> usize {
    let tx = conn.transaction().expect("transaction");
    let mut new = 0;
    for (i, (id, project, outcome, ms)) in rows.iter().enumerate() {
        new += tx
            .execute(
                "INSERT OR IGNORE INTO executions (id, project, name, attempt, finished_at, duration_ms, outcome, host)
                 VALUES (?1, ?2, 'n', 1, ?3, ?4, ?5, 'h')",
                rusqlite::params![id, project, T0 as i64 + i as i64, ms, outcome],
            )
            .expect("insert");
    }
    tx.commit().expect("commit");
    new
}

/// `(project, outcome, duration_ms)` of row `i` of a mixed history: four
/// projects (the inbox top included), every outcome of the first schema
/// (rows are also written to a ledger at version 3), one row in five
/// without a duration, durations from 0 ms to about 11 days, most short.
fn mixed_row(i: u64) -> (&'static str, &'static str, Option<i64>) {
    let projects = ["", "web", "ops/nightly", "solo"];
    // The outcomes of migration 1: the rows also go into older schemas.
    let outcomes = &Outcome::ALL[..7];
    let outcome = outcomes[(i % outcomes.len() as u64) as usize].as_str();
    let x = (i * 2_654_435_761) % 1000;
    let ms = (i % 5 != 0).then_some((x * x * x) as i64);
    (projects[(i % 7 % 4) as usize], outcome, ms)
}

fn mixed_rows(ids: std::ops::Range<u64>) -> Vec<(String, &'static str, &'static str, Option<i64>)> {
    ids.map(|i| {
        let (project, outcome, ms) = mixed_row(i);
        (format!("x{i}"), project, outcome, ms)
    })
    .collect()
}

/// Rows of a query, every column read as SQLite's own value.
fn table(conn: &rusqlite::Connection, sql: &str) -> Vec<Vec<rusqlite::types::Value>> {
    let mut stmt = conn.prepare(sql).expect("prepare");
    let n = stmt.column_count();
    let rows = stmt
        .query_map([], |r| (0..n).map(|i| r.get(i)).collect())
        .expect("query");
    rows.collect::<Result<_, _>>().expect("rows")
}

/// The tables kept by triggers hold what a plain recount of `executions`
/// gives.
fn assert_kept_stats_match_a_recount(conn: &rusqlite::Connection) {
    let pairs = [
        (
            "SELECT project, outcome, n, timed FROM stats_counts ORDER BY 1, 2",
            "SELECT project, outcome, COUNT(*), COUNT(duration_ms) FROM executions
             GROUP BY 1, 2 ORDER BY 1, 2",
        ),
        (
            "SELECT project, bucket, n FROM stats_buckets ORDER BY 1, 2",
            "SELECT project, (SELECT MAX(lo) FROM duration_buckets WHERE lo <= duration_ms),
                    COUNT(*)
             FROM executions WHERE duration_ms IS NOT NULL GROUP BY 1, 2 ORDER BY 1, 2",
        ),
        (
            "SELECT project, duration_ms, n FROM stats_durations ORDER BY 1, 2",
            "SELECT project, duration_ms, COUNT(*) FROM executions
             WHERE duration_ms IS NOT NULL GROUP BY 1, 2 ORDER BY 1, 2",
        ),
        (
            "SELECT duration_ms, n FROM stats_durations_all ORDER BY 1",
            "SELECT duration_ms, COUNT(*) FROM executions
             WHERE duration_ms IS NOT NULL GROUP BY 1 ORDER BY 1",
        ),
    ];
    for (kept, recount) in pairs {
        assert_eq!(table(conn, kept), table(conn, recount), "{kept}");
    }
}

/// Median and p95 of `durations` by sorting them (nearest rank).
fn sorted_percentiles(mut durations: Vec<u64>) -> (Option<u64>, Option<u64>) {
    durations.sort_unstable();
    let at = |pct: usize| {
        let rank = (pct * durations.len()).div_ceil(100).max(1);
        durations.get(rank - 1).copied()
    };
    (at(50), at(95))
}

/// Lifetime stats (overall, per project, and with `--project`) against
/// percentiles recomputed by sorting every duration, and against the
/// `--since` path over all time.
fn assert_lifetime_stats_are_exact(l: &Ledger) {
    use history::Filter;
    let durations = table(
        &l.conn,
        "SELECT project, duration_ms FROM executions WHERE duration_ms IS NOT NULL",
    );
    let mut by_project: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    for row in durations {
        let (rusqlite::types::Value::Text(p), rusqlite::types::Value::Integer(ms)) =
            (&row[0], &row[1])
        else {
            panic!("unexpected row {row:?}");
        };
        by_project.entry(p.clone()).or_default().push(*ms as u64);
    }
    let percentiles = |s: &history::Summary| (s.median_duration_ms, s.p95_duration_ms);
    let lifetime = l.stats(&Filter::default()).expect("lifetime");
    let all: Vec<u64> = by_project.values().flatten().copied().collect();
    assert_eq!(
        percentiles(&lifetime.overall),
        sorted_percentiles(all),
        "overall"
    );
    for (project, s) in &lifetime.projects {
        let expected = sorted_percentiles(by_project.get(project).cloned().unwrap_or_default());
        assert_eq!(percentiles(s), expected, "project {project:?}");
        let only = Filter {
            project: Some(project.clone()),
            ..Filter::default()
        };
        let one = l.stats(&only).expect("one project");
        assert_eq!(percentiles(&one.overall), expected, "--project {project:?}");
        assert_eq!(one.overall.total, s.total, "--project {project:?}");
    }
    let window = Filter {
        since_ms: Some(0),
        ..Filter::default()
    };
    let json = |s: &history::Stats| serde_json::to_value(s).expect("serialise");
    assert_eq!(json(&lifetime), json(&l.stats(&window).expect("window")));
}

#[test]
fn duration_buckets_cover_every_duration_once_and_stay_narrow() {
    let dir = tempfile::tempdir().expect("tempdir");
    let l = Ledger::open(&dir.path().join("ledger.db")).expect("open");
    let buckets = table(&l.conn, "SELECT lo, hi FROM duration_buckets ORDER BY lo");
    let bounds: Vec<(i64, i64)> = buckets
        .iter()
        .map(|b| match (&b[0], &b[1]) {
            (rusqlite::types::Value::Integer(lo), rusqlite::types::Value::Integer(hi)) => {
                (*lo, *hi)
            }
            other => panic!("not integers: {other:?}"),
        })
        .collect();
    assert_eq!(bounds.first().map(|b| b.0), Some(0));
    assert_eq!(bounds.last().map(|b| b.1), Some(i64::MAX));
    assert!(bounds.len() < 1000, "{} buckets", bounds.len());
    for pair in bounds.windows(2) {
        assert_eq!(pair[0].1 + 1, pair[1].0, "contiguous: {pair:?}");
    }
    for &(lo, hi) in &bounds[..bounds.len() - 1] {
        assert!(hi - lo < (lo / 16).max(1), "narrow: {lo}..={hi}");
    }
}

#[test]
fn kept_stats_match_a_recount_after_mixed_duplicate_and_untimed_inserts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut l = Ledger::open(&dir.path().join("ledger.db")).expect("open");
    assert_eq!(insert_rows(&mut l.conn, &mixed_rows(0..400)), 400);
    assert_kept_stats_match_a_recount(&l.conn);
    // Duplicates are ignored by the outer INSERT OR IGNORE and must not be
    // counted, whether alone or mixed with new rows.
    assert_eq!(insert_rows(&mut l.conn, &mixed_rows(0..400)), 0);
    assert_eq!(insert_rows(&mut l.conn, &mixed_rows(350..450)), 50);
    // A plain INSERT of a duplicate fails, and its trigger work with it.
    let dup = l.conn.execute(
        "INSERT INTO executions (id, project, name, attempt, finished_at, duration_ms, outcome, host)
         VALUES ('x1', 'web', 'n', 1, 1, 5, 'success', 'h')",
        [],
    );
    assert!(dup.is_err(), "duplicate id refused");
    // Through the library: a new (project, outcome) pair first met inside
    // INSERT OR IGNORE, then the same execution again.
    let e = execution("fresh", "n", Outcome::Rejected, 1_000);
    assert!(l.record(&e, &[], &[]).expect("record"));
    assert!(!l.record(&e, &[], &[]).expect("record again"));
    assert_kept_stats_match_a_recount(&l.conn);
    let s = l.stats(&history::Filter::default()).expect("stats");
    assert_eq!(s.overall.total, 451);
    assert_eq!(s.projects["fresh"].by_outcome["rejected"], 1);
    assert_eq!(s.projects["fresh"].with_duration, 0);
    assert_lifetime_stats_are_exact(&l);
}

#[test]
fn lifetime_percentiles_are_exact_for_small_and_skewed_data() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut l = Ledger::open(&dir.path().join("ledger.db")).expect("open");
    let mut rows: Vec<(String, &str, &str, Option<i64>)> = Vec::new();
    let mut add = |project: &'static str, ms: Option<i64>| {
        rows.push((format!("r{}", rows.len()), project, "success", ms));
    };
    add("one", Some(7));
    add("two", Some(3));
    add("two", Some(1));
    for ms in [5, 9, 5] {
        add("three", Some(ms));
    }
    add("untimed", None);
    // Nearly all in one bucket, the rank found from its top end, and
    // outliers at both ends of the duration range.
    for _ in 0..300 {
        add("flat", Some(4_000));
    }
    for ms in [0, 1, 1_000_000_000_000, 9_000_000_000_000_000_000] {
        add("flat", Some(ms));
    }
    // Values on bucket bounds (each bucket's smallest and largest).
    for ms in [
        31, 32, 33, 34, 46, 47, 48, 50, 51, 1_026, 1_027, 1_090, 1_091,
    ] {
        add("edges", Some(ms));
    }
    // A long tail: most runs short, a few taking days.
    for i in 0..2_000u64 {
        let x = (i * 2_654_435_761) % 1000;
        add("tail", Some((x * x * x) as i64));
    }
    insert_rows(&mut l.conn, &rows);
    assert_kept_stats_match_a_recount(&l.conn);
    assert_lifetime_stats_are_exact(&l);
    let s = l.stats(&history::Filter::default()).expect("stats");
    assert_eq!(s.projects["flat"].median_duration_ms, Some(4_000));
    assert_eq!(
        s.projects["two"].median_duration_ms,
        Some(1),
        "lower middle"
    );
    assert_eq!(s.projects["untimed"].median_duration_ms, None);
}

#[test]
fn migrating_a_v3_ledger_with_rows_gives_exact_stats() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ledger.db");
    {
        let mut conn = rusqlite::Connection::open(&path).expect("open");
        for sql in &migrations::MIGRATIONS[..3] {
            conn.execute_batch(sql).expect("migrate to v3");
        }
        conn.pragma_update(None, "user_version", 3)
            .expect("version");
        assert_eq!(insert_rows(&mut conn, &mixed_rows(0..1_500)), 1_500);
    }
    let mut l = Ledger::open(&path).expect("open migrates");
    let v: u32 = l
        .conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .expect("version");
    assert_eq!(v, SCHEMA_VERSION);
    assert_kept_stats_match_a_recount(&l.conn);
    assert_lifetime_stats_are_exact(&l);
    // The triggers keep them from there on.
    assert_eq!(insert_rows(&mut l.conn, &mixed_rows(1_000..2_000)), 500);
    assert_kept_stats_match_a_recount(&l.conn);
    assert_lifetime_stats_are_exact(&l);
}

/// A ledger file of `rows` executions, closed (checkpointed).
fn ledger_with_rows(path: &std::path::Path, rows: u64) {
    let mut l = Ledger::open(path).expect("open");
    for i in 0..rows {
        l.record(
            &execution("p", &format!("n{i}"), Outcome::Success, i + 1),
            &[],
            &[],
        )
        .expect("record");
    }
}

#[test]
fn foreign_tables_at_our_schema_version_are_damage_and_left_untouched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ledger.db");
    let conn = Connection::open(&path).expect("open");
    conn.execute_batch(&format!(
        "CREATE TABLE executions (note TEXT); PRAGMA user_version = {SCHEMA_VERSION};"
    ))
    .expect("foreign schema");
    drop(conn);
    let before = std::fs::read(&path).expect("read");
    let e = Ledger::open(&path).err().expect("refused");
    assert!(e.is_damaged(), "{e}");
    assert!(e.to_string().contains("history repair"), "{e}");
    assert_eq!(
        std::fs::read(&path).expect("read"),
        before,
        "judged before written"
    );
}

#[test]
fn garbage_is_damage_and_a_busy_lock_is_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ledger.db");
    jobwarden_sys::fsio::write_atomic(dir.path(), &path, &[0x5a; 10_000]).expect("write");
    let e = Ledger::open(&path).err().expect("refused");
    assert!(e.is_damaged(), "{e}");
    let busy = LedgerError {
        path,
        source: rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            None,
        ),
    };
    assert!(!busy.is_damaged());
    assert!(!busy.to_string().contains("history repair"));
}

#[test]
fn quick_check_finds_a_corrupt_page_that_opening_does_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ledger.db");
    ledger_with_rows(&path, 300);
    let page_size: usize = 4096;
    let root: i64 = Connection::open(&path)
        .expect("open")
        .query_row(
            "SELECT rootpage FROM sqlite_schema WHERE name = 'executions_by_finished'",
            [],
            |r| r.get(0),
        )
        .expect("index root page");
    let mut bytes = std::fs::read(&path).expect("read");
    let at = (root as usize - 1) * page_size;
    bytes[at..at + page_size].fill(0xa5);
    jobwarden_sys::fsio::write_atomic(dir.path(), &path, &bytes).expect("corrupt the page");
    let l = Ledger::open(&path).expect("opens: the schema is intact");
    let e = l.quick_check().expect_err("quick_check finds it");
    assert!(e.is_damaged(), "{e}");
    assert!(e.to_string().contains("quick_check"), "{e}");
}

#[test]
fn impossible_times_are_refused_by_the_schema_and_clock_steps_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut l = Ledger::open(&dir.path().join("ledger.db")).expect("open");
    let now = jobwarden_sys::clock::Timestamp::now().epoch_ms();
    let mut before_2020 = execution("p", "n", Outcome::Success, 0);
    before_2020.finished_at = 1_000;
    let mut far_ahead = execution("p", "n", Outcome::Success, 0);
    far_ahead.finished_at = now + 2 * 86_400_000;
    let mut started_wrong = execution("p", "n", Outcome::Success, 0);
    started_wrong.started_at = Some(5);
    let named = [
        "finished_at 1970-01-01T00:00:01",
        "finished_at 20",
        "started_at 1970",
    ];
    for (bad, named) in [before_2020, far_ahead, started_wrong]
        .into_iter()
        .zip(named)
    {
        let err = l.record(&bad, &[], &[]).expect_err("refused");
        let text = err.to_string();
        assert!(
            text.contains("impossible time") && text.contains(named),
            "{text}"
        );
    }
    let mut soon = execution("p", "n", Outcome::Success, 0);
    soon.finished_at = now + 3_600_000;
    assert!(l.record(&soon, &[], &[]).expect("an hour ahead is fine"));

    assert_eq!(l.last_clock_step().expect("none"), None);
    l.record_clock_step(now, -3_600_000, "h").expect("step");
    l.record_clock_step(now + 10, 5_000, "h").expect("step");
    assert_eq!(
        l.last_clock_step().expect("last"),
        Some((now + 10, 5_000, "h".to_owned()))
    );
}

#[test]
fn a_start_the_schema_would_refuse_is_left_out_and_the_row_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut l = Ledger::open(&dir.path().join("ledger.db")).expect("open");
    let prompt = PromptName {
        project: "p".into(),
        name: "n".into(),
    };
    let mut rec = JobRecord::new_queued(
        JobId::generate(),
        &prompt,
        "inbox/p/n.running.md".into(),
        "h",
    );
    rec.state = JobState::Succeeded;
    rec.started_at = Some(jobwarden_sys::clock::Timestamp::from_epoch_ms(
        31_536_000_000,
    ));
    rec.finished_at = Some(jobwarden_sys::clock::Timestamp::now());
    let e = Execution::from_record(&rec, Outcome::Success, Some("archived"), Source::Daemon);
    assert_eq!((e.started_at, e.duration_ms), (None, None));
    assert!(l.record(&e, &[], &[]).expect("kept"));
}

#[test]
fn a_listed_or_printed_path_is_stored_absolute_without_dot_components() {
    assert_eq!(stored_path(Some("/w"), "./src/a.rs"), "/w/src/a.rs");
    assert_eq!(stored_path(Some("/w/"), "src/./a.rs"), "/w/src/a.rs");
    assert_eq!(stored_path(Some("/w"), "/abs/b.c"), "/abs/b.c");
    assert_eq!(stored_path(None, "rel.c"), "rel.c");
}

#[test]
fn the_job_index_knows_profiles_and_migration_11_learns_them_from_the_rows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("ledger.db");
    let prompt = PromptName {
        project: "p".into(),
        name: "n".into(),
    };
    let mut ended =
        JobRecord::new_queued(JobId::generate(), &prompt, "inbox/n.running.md".into(), "h");
    ended.profile = Some("review".into());
    ended.state = JobState::Succeeded;
    let mut live =
        JobRecord::new_queued(JobId::generate(), &prompt, "inbox/n.running.md".into(), "h");
    live.profile = Some("fast".into());
    {
        let mut l = Ledger::open(&path).expect("open");
        l.index_job(&ended).expect("index");
        l.index_job(&live).expect("index");
        let exec =
            Execution::from_record(&ended, Outcome::Success, Some("archived"), Source::Daemon);
        l.record(&exec, &[], &[]).expect("record");
        let only = |profile: &str| JobFilter {
            profile: Some(profile.into()),
            ..JobFilter::default()
        };
        let review = l.list_jobs(&only("review"), 10).expect("list");
        assert_eq!(review.len(), 1);
        assert_eq!(review[0].id, ended.job_id.as_str());
        assert_eq!(review[0].profile.as_deref(), Some("review"));
        assert!(l.list_jobs(&only("none"), 10).expect("list").is_empty());
        // A snapshot without a profile never forgets the one known.
        let mut later = live.clone();
        later.profile = None;
        l.index_job(&later).expect("index");
        let row = l
            .indexed_job(live.job_id.as_str())
            .expect("read")
            .expect("row");
        assert_eq!(row.profile.as_deref(), Some("fast"));
        // Back to a ledger from before migration 11.
        l.conn
            .execute_batch(
                "DROP TABLE execution_prompts; DROP INDEX executions_by_prompt_written; DROP TABLE execution_slurm; DROP INDEX jobs_by_profile; \
                 ALTER TABLE jobs DROP COLUMN profile; PRAGMA user_version = 10;",
            )
            .expect("downgrade");
    }
    let l = Ledger::open(&path).expect("open migrates");
    let ended_row = l
        .indexed_job(ended.job_id.as_str())
        .expect("read")
        .expect("row");
    assert_eq!(
        ended_row.profile.as_deref(),
        Some("review"),
        "from its ledger row"
    );
    let live_row = l
        .indexed_job(live.job_id.as_str())
        .expect("read")
        .expect("row");
    assert_eq!(live_row.profile, None, "learnt at the next refresh");
}

#[test]
fn a_start_after_the_end_of_a_clock_stepped_back_is_the_end() {
    let prompt = PromptName {
        project: "p".into(),
        name: "n".into(),
    };
    let mut rec =
        JobRecord::new_queued(JobId::generate(), &prompt, "inbox/x.running.md".into(), "h");
    rec.state = JobState::Failed;
    rec.started_at = Some(jobwarden_sys::clock::Timestamp::from_epoch_ms(
        crate::T0 + 60_000,
    ));
    rec.finished_at = Some(jobwarden_sys::clock::Timestamp::from_epoch_ms(crate::T0));
    let e = Execution::from_record(&rec, Outcome::Failure, Some("archived"), Source::Daemon);
    assert_eq!(e.finished_at, crate::T0);
    assert_eq!(e.started_at, Some(crate::T0), "finished >= started");
    assert_eq!(e.duration_ms, Some(0));
}
