//! The ledger against real SQLite files in temporary folders.

use super::*;
use crate::job::{JobId, JobRecord, JobState};
use crate::layout::PromptName;

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
    e.finished_at = finished_at;
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
        l.cooldown_until("a", "n", c, 2_000).expect("q"),
        Some(101_000)
    );
    assert_eq!(
        l.cooldown_until("a", "n", c, 101_000).expect("q"),
        None,
        "ends on time"
    );
    assert_eq!(
        l.cooldown_until("b", "n", c, 2_000).expect("q"),
        None,
        "projects are isolated"
    );
    l.record(&execution("a", "n", Outcome::RateLimited, 5_000), &[], &[])
        .expect("record");
    assert_eq!(
        l.cooldown_until("a", "n", c, 6_000).expect("q"),
        Some(15_000)
    );
    l.record(&execution("a", "n", Outcome::Success, 7_000), &[], &[])
        .expect("record");
    assert_eq!(
        l.cooldown_until("a", "n", c, 7_001).expect("q"),
        None,
        "success clears it"
    );
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
    rec.created_at = crate::clock::Timestamp::from(
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
    a_done.updated_at = crate::clock::Timestamp::from(
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

    // The folder of `b` is gone: a sync drops its row.
    let gone = l
        .sync_job_index(&[IndexedJob::from_record(&a_done)])
        .expect("sync");
    assert_eq!(gone, 1);
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
    l.record(&execution("p", "n", Outcome::Timeout, 15), &[], &[])
        .expect("record");
    assert!(l.prompts_needing_attention(5).expect("q").is_empty());
    l.record(&execution("q", "m", Outcome::RateLimited, 30), &[], &[])
        .expect("record");
    let attention = l.prompts_needing_attention(5).expect("q");
    assert_eq!(attention.len(), 1);
    assert_eq!(
        (attention[0].0.as_str(), attention[0].2.as_str()),
        ("q", "rate_limited")
    );
    assert!(l.ever_ran().expect("ever"));
}
