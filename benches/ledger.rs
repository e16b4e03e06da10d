#![allow(clippy::disallowed_methods)] // fixtures, written with plain std writes
#![allow(clippy::disallowed_macros)] // a benchmark prints its figures plainly

//! Ledger benchmark: figures against the DESIGN §12 targets, reported, never
//! asserted (machines are noisy). Run with `cargo bench --bench ledger`.
//!
//! Builds a temporary root whose ledger holds 1,000,000 executions
//! (generated directly with SQL, fast), then measures:
//! - recording one execution through the library (`Ledger::record`, one
//!   transaction with two artifacts and two paths), median of 500;
//! - `jobwarden history check` and `history stats` as whole processes,
//!   median of 20 runs each;
//! - with 100,000 finished jobs in the job index as well (4 of them running,
//!   with real run folders): `status`, `jobs --limit 20` and `show <job>`
//!   as whole processes, median of 20 runs each.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use jobwarden_ledger::{Artifact, Execution, Ledger, Outcome, PathRelation, Source};

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
    fill_jobs(&path);
    let shown = real_jobs(root);
    let status = median(20, || time_cli(bin, root, &["status", "--json"]));
    let jobs = median(20, || time_cli(bin, root, &["jobs", "--limit", "20"]));
    let show = median(20, || time_cli(bin, root, &["show", &shown]));
    let show_short = median(20, || {
        time_cli(bin, root, &["show", &shown[shown.len() - 6..]])
    });
    println!(
        "{:<28} {:>10} {:>10}  verdict",
        "figure", "median", "target"
    );
    report("record one execution", record, Duration::from_millis(2));
    report("history check (process)", check, Duration::from_millis(20));
    report("history stats (process)", stats, Duration::from_millis(20));
    report("status (process)", status, Duration::from_millis(20));
    report("jobs --limit 20 (process)", jobs, Duration::from_millis(20));
    report("show <full id> (process)", show, Duration::from_millis(20));
    report(
        "show <short id> (process)",
        show_short,
        Duration::from_millis(20),
    );
}

/// How many finished jobs the job index holds.
const JOBS: u64 = 100_000;

/// 100,000 finished jobs in the index (their run folders are not needed to
/// list them: finished rows are answered from the index alone).
fn fill_jobs(path: &std::path::Path) {
    let mut conn = rusqlite::Connection::open(path).expect("open for fill");
    let tx = conn.transaction().expect("transaction");
    {
        let mut stmt = tx
            .prepare(
                "INSERT INTO jobs (id, id_short, project, name, state, attempt, created_at, started_at,
                     finished_at, exit_code, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6, ?6, ?7, ?8, ?7)",
            )
            .expect("prepare");
        let states = [
            "succeeded",
            "succeeded",
            "succeeded",
            "failed",
            "timed_out",
            "aborted",
        ];
        for i in 0..JOBS {
            let id = format!("{:08x}-0000-7000-8000-{:012x}", 0x0190_0000 + i / 1000, i);
            let created = 1_700_000_000_000 + i as i64 * 1000;
            let state = states[(i % states.len() as u64) as usize];
            stmt.execute(rusqlite::params![
                id,
                jobwarden_ledger::short_id(&id),
                format!("p{}", i % PROJECTS),
                format!("n{}", i % NAMES),
                state,
                created,
                created + 5000,
                (state != "succeeded") as i64,
            ])
            .expect("insert");
        }
    }
    tx.commit().expect("commit");
}

/// Four running jobs and one finished one with real run folders, indexed
/// as the daemon indexes them. Returns the finished one's id.
fn real_jobs(root: &std::path::Path) -> String {
    use jobwarden_model::job::{JobId, JobRecord, JobState};
    use jobwarden_model::layout::{Layout, PromptName};
    let layout = Layout::new(root.to_path_buf());
    let mut ledger = Ledger::open(&layout.ledger()).expect("open");
    let mut last = String::new();
    for (i, state) in ["running", "running", "running", "running", "succeeded"]
        .iter()
        .enumerate()
    {
        let id = JobId::generate();
        std::fs::create_dir_all(layout.run_dir(&id)).expect("run dir");
        let prompt = PromptName {
            project: "live".into(),
            name: format!("job{i}"),
        };
        let mut rec = JobRecord::new_queued(
            id.clone(),
            &prompt,
            "inbox/live/x.running.md".into(),
            "bench",
        );
        rec.state = state.parse::<JobState>().expect("state");
        rec.pid = Some(1);
        rec.save(&layout).expect("save");
        std::fs::write(layout.job_log(&id), "line\n".repeat(1000)).expect("log");
        ledger.index_job(&rec).expect("index");
        last = id.to_string();
    }
    last
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

/// When the recorded executions finished (2023-11-14).
const FINISHED: u64 = 1_700_000_000_000;

fn time_record(path: &std::path::Path, n: u64) -> Duration {
    let mut ledger = Ledger::open(path).expect("open");
    let mut exec = Execution::new(
        format!("rec-{n}"),
        "p1",
        "n1",
        Outcome::Success,
        // Real times: the schema refuses those before 2020 (migration 8).
        FINISHED,
        "bench",
        Source::Daemon,
    );
    exec.profile = Some("default".into());
    exec.command = Some(vec!["codex".into(), "exec".into()]);
    exec.workdir = Some("/srv/repo".into());
    exec.started_at = Some(FINISHED - 1);
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
    // 1 is a clean "no"; 3 is `status`'s "no daemon runs here".
    assert!(
        status.code().is_some_and(|c| c <= 1 || c == 3),
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
