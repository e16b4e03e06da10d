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
