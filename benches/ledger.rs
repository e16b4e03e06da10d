//! Ledger benchmark: figures against the DESIGN §12 targets, reported, never
//! asserted (machines are noisy). Run with `cargo bench --bench ledger`.
//!
//! Builds a temporary root whose ledger holds 1,000,000 executions
//! (generated directly with SQL, fast), then measures:
//! - recording one execution through the library (`Ledger::record`, one
//!   transaction with two artifacts and two paths), median of 500;
//! - `jobwarden history check` and `history stats` as whole processes,
//!   median of 20 runs each.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use jobwarden::ledger::{Artifact, Execution, Ledger, Outcome, PathRelation, Source};

const ROWS: u64 = 1_000_000;
const PROJECTS: u64 = 50;
const NAMES: u64 = 400;

fn main() {
    let dir = tempfile::tempdir().expect("temporary root");
    let root = dir.path();
    let path = root.join("ledger.db");
    let started = Instant::now();
    drop(Ledger::open(&path).expect("create ledger"));
    fill(&path);
    println!("generated {ROWS} executions in {:.1?}", started.elapsed());

    let mut n = 0;
    let record = median(500, || {
        n += 1;
        time_record(&path, n)
    });
    let bin = env!("CARGO_BIN_EXE_jobwarden");
    let check = median(20, || {
        time_cli(bin, root, &["history", "check", "p7", "n42"])
    });
    let stats = median(20, || time_cli(bin, root, &["history", "stats", "--json"]));
    println!(
        "{:<28} {:>10} {:>10}  verdict",
        "figure", "median", "target"
    );
    report("record one execution", record, Duration::from_millis(2));
    report("history check (process)", check, Duration::from_millis(20));
    report("history stats (process)", stats, Duration::from_millis(20));
}

/// 1M rows spread over 50 projects × 400 names, outcomes mixed.
fn fill(path: &std::path::Path) {
    let mut conn = rusqlite::Connection::open(path).expect("open for fill");
    let tx = conn.transaction().expect("transaction");
    {
        let mut stmt = tx
            .prepare(
                "INSERT INTO executions (id, project, name, attempt, started_at, finished_at, duration_ms, outcome, exit_code, host)
                 VALUES (?1, ?2, ?3, 1, ?4, ?5, ?6, ?7, ?8, 'bench')",
            )
            .expect("prepare");
        let outcomes = [
            "success",
            "success",
            "success",
            "failure",
            "timeout",
            "rate_limited",
            "aborted",
        ];
        for i in 0..ROWS {
            let finished = 1_700_000_000_000 + i as i64 * 1000;
            let duration = (i * 7919 % 600_000) as i64;
            let outcome = outcomes[(i % outcomes.len() as u64) as usize];
            stmt.execute(rusqlite::params![
                format!("bench-{i}"),
                format!("p{}", i % PROJECTS),
                format!("n{}", i % NAMES),
                finished - duration,
                finished,
                duration,
                outcome,
                (outcome != "success") as i64,
            ])
            .expect("insert");
        }
    }
    tx.commit().expect("commit");
}

fn time_record(path: &std::path::Path, n: u64) -> Duration {
    let mut ledger = Ledger::open(path).expect("open");
    let mut exec = Execution::new(
        format!("rec-{n}"),
        "p1",
        "n1",
        Outcome::Success,
        2,
        "bench",
        Source::Daemon,
    );
    exec.profile = Some("default".into());
    exec.command = Some(vec!["codex".into(), "exec".into()]);
    exec.workdir = Some("/srv/repo".into());
    exec.started_at = Some(1);
    exec.duration_ms = Some(1);
    exec.exit_code = Some(0);
    exec.disposition = Some("archived".into());
    let tail = |kind| Artifact {
        kind,
        text: "x".repeat(4096),
        truncated: false,
        bytes: 4096,
    };
    let paths = [
        (PathRelation::ExecutedOn, "/srv/repo".to_owned()),
        (PathRelation::Affected, "/srv/repo/a.rs".to_owned()),
    ];
    let start = Instant::now();
    ledger
        .record(&exec, &[tail("stdout_tail"), tail("stderr_tail")], &paths)
        .expect("record");
    start.elapsed()
}

fn time_cli(bin: &str, root: &std::path::Path, args: &[&str]) -> Duration {
    let start = Instant::now();
    let status = Command::new(bin)
        .arg("--root")
        .arg(root)
        .args(args)
        .env_remove("JOBWARDEN_CONFIG")
        .env("XDG_CONFIG_HOME", root.join("no-config"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run jobwarden");
    let elapsed = start.elapsed();
    assert!(
        status.code().is_some_and(|c| c <= 1),
        "{args:?} failed: {status}"
    );
    elapsed
}

fn median(n: usize, mut f: impl FnMut() -> Duration) -> Duration {
    let mut samples: Vec<Duration> = (0..n).map(|_| f()).collect();
    samples.sort();
    samples[n / 2]
}

fn report(what: &str, got: Duration, target: Duration) {
    let verdict = if got <= target { "met" } else { "MISSED" };
    println!(
        "{what:<28} {:>10.2?} {:>10.2?}  {verdict} ({:.2}x of target)",
        got,
        target,
        got.as_secs_f64() / target.as_secs_f64()
    );
}
