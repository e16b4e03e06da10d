//! Retention (`jobwarden gc`): finished run folders and archived prompts go
//! by count and age, artifacts beyond `keep_artifacts` per prompt are
//! pruned, and nothing else is touched: not a running job, not an unreadable
//! record, not a stray folder, not an `executions` row.
//!
//! Jobs are real (a daemon runs them); the retention settings are written
//! only once the jobs exist, so that a daemon's own periodic pass (default
//! settings) cannot interfere.

use std::fs;
use std::path::PathBuf;

use serde_json::Value;

use crate::support::*;

/// Runs one job per name, one after the other (so they finish in that
/// order), then stops the daemon. Returns the finished jobs.
fn finished_jobs(sb: &Sandbox, names: &[&str]) -> Vec<Job> {
    sb.configure(&ConfigToml::new(&["true"]));
    let mut daemon = Daemon::start(sb);
    let mut done: Vec<Job> = Vec::new();
    for name in names {
        sb.drop_prompt("proj", name, format!("job {name}\n"));
        let ids: Vec<String> = done.iter().map(|j| j.id.clone()).collect();
        let job = sb.wait_done_excluding("proj", name, &ids, secs(15));
        assert_eq!(job.state(), "succeeded", "{:#}", job.record);
        // Its monitor lets go of it a moment after the archive move; until
        // then retention rightly counts the job as active.
        wait_monitor_released(sb, &job.id, secs(10));
        done.push(job);
    }
    daemon.sigterm();
    daemon.wait_exit(secs(5));
    done
}

/// Writes the retention settings (the command stays `true`).
fn retention(sb: &Sandbox, keep_runs: u32, keep_days: u32) -> ConfigToml {
    let cfg = ConfigToml::new(&["true"])
        .global("keep_runs", &keep_runs.to_string())
        .global("keep_days", &keep_days.to_string());
    sb.configure(&cfg);
    cfg
}

/// `jobwarden gc --json [extra]`, which must exit 0; its report.
fn gc_json(sb: &Sandbox, extra: &[&str]) -> Value {
    let mut args = vec!["gc", "--json"];
    args.extend_from_slice(extra);
    let out = sb.run(&args);
    assert_eq!(out.code(), 0, "gc failed: {out:?}");
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("gc --json: {e}: {out:?}"))
}

fn archived(job: &Job) -> PathBuf {
    job.root()
        .join(job.str_field("archive_path").expect("archive_path"))
}

fn paths(report: &Value, key: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = report[key]
        .as_array()
        .unwrap_or_else(|| panic!("{key} is not a list: {report:#}"))
        .iter()
        .map(|p| PathBuf::from(p.as_str().expect("path string")))
        .collect();
    v.sort();
    v
}

fn sorted(mut v: Vec<PathBuf>) -> Vec<PathBuf> {
    v.sort();
    v
}

fn ledger(sb: &Sandbox) -> rusqlite::Connection {
    rusqlite::Connection::open(sb.root.join("ledger.db")).expect("open ledger.db")
}

fn count(sb: &Sandbox, sql: &str) -> i64 {
    ledger(sb)
        .query_row(sql, [], |r| r.get(0))
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Execution ids as `history list --json` shows them, if that command works
/// (and prints a JSON list) in this build.
fn history_list_ids(sb: &Sandbox) -> Option<Vec<String>> {
    let out = sb.run(&["history", "list", "--json", "--limit", "1000"]);
    if out.code() != 0 {
        return None;
    }
    let rows: Value = serde_json::from_str(&out.stdout).ok()?;
    let mut ids: Vec<String> = rows
        .as_array()?
        .iter()
        .filter_map(|r| r["id"].as_str().map(str::to_string))
        .collect();
    ids.sort();
    Some(ids)
}

#[test]
fn dry_run_lists_what_would_go_and_removes_nothing() {
    let sb = Sandbox::new();
    let jobs = finished_jobs(&sb, &["a", "b", "c"]);
    retention(&sb, 1, 0);

    let report = gc_json(&sb, &["--dry-run"]);
    assert_eq!(report["dry_run"], true);
    assert_eq!(report["runs_removed"], 2, "{report:#}");
    assert_eq!(
        paths(&report, "run_dirs"),
        sorted(vec![jobs[0].dir.clone(), jobs[1].dir.clone()])
    );
    assert_eq!(
        paths(&report, "archived_prompts"),
        sorted(vec![archived(&jobs[0]), archived(&jobs[1])])
    );
    for job in &jobs {
        assert!(job.dir.join("job.json").exists(), "{} still there", job.id);
        assert!(archived(job).exists(), "archive of {} still there", job.id);
    }

    let human = sb.run(&["gc", "--dry-run"]);
    assert_eq!(human.code(), 0, "{human:?}");
    let line = format!("would remove run folder {}", jobs[0].dir.display());
    assert!(human.stdout.contains(&line), "{}", human.stdout);
    assert_eq!(sb.jobs().len(), 3, "still nothing removed");
}

#[test]
fn keep_runs_keeps_exactly_the_newest_n_and_every_execution_row() {
    let sb = Sandbox::new();
    let jobs = finished_jobs(&sb, &["a", "b", "c", "d"]);
    let before_rows = count(&sb, "SELECT count(*) FROM executions");
    let before_list = history_list_ids(&sb);
    retention(&sb, 2, 0);

    let report = gc_json(&sb, &[]);
    assert_eq!(report["runs_removed"], 2, "{report:#}");
    assert_eq!(report["prompts_removed"], 2, "{report:#}");
    assert_eq!(report["runs_kept"], 2, "{report:#}");
    let survivors: Vec<String> = sb.jobs().into_iter().map(|j| j.id).collect();
    assert_eq!(survivors, vec![jobs[2].id.clone(), jobs[3].id.clone()]);
    for gone in &jobs[..2] {
        assert!(!gone.dir.exists(), "run folder of {} removed", gone.id);
        assert!(!archived(gone).exists(), "archive of {} removed", gone.id);
    }
    for kept in &jobs[2..] {
        assert!(archived(kept).exists(), "archive of {} kept", kept.id);
    }

    assert_eq!(before_rows, 4, "one execution row per job");
    assert_eq!(count(&sb, "SELECT count(*) FROM executions"), before_rows);
    // `history list` is checked too when this build has it.
    if let Some(before) = before_list {
        assert_eq!(before.len(), 4, "history list shows every execution");
        assert_eq!(
            history_list_ids(&sb),
            Some(before),
            "history list unchanged"
        );
    }
    let again = gc_json(&sb, &[]);
    assert_eq!(again["runs_removed"], 0, "a second pass has nothing to do");
}

#[test]
fn keep_days_keeps_jobs_younger_than_that() {
    let sb = Sandbox::new();
    let jobs = finished_jobs(&sb, &["a", "b", "c"]);
    retention(&sb, 0, 1);

    let report = gc_json(&sb, &[]);
    assert_eq!(report["runs_removed"], 0, "{report:#}");
    assert_eq!(report["runs_kept"], 3, "{report:#}");
    for job in &jobs {
        assert!(
            job.dir.exists() && archived(job).exists(),
            "{} kept",
            job.id
        );
    }
}

/// Waits for `$JOBWARDEN_RUN_DIR/gate`.
const GATED: &str = r#"while [ ! -e "$JOBWARDEN_RUN_DIR/gate" ]; do sleep 0.05; done"#;

#[test]
fn gc_never_touches_a_running_job() {
    let sb = Sandbox::new();
    let script = sb.script("gated", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]));
    let _daemon = Daemon::start(&sb);
    sb.drop_prompt("proj", "early", "finishes first\n");
    let early = sb.wait_state("proj", "early", "running", secs(15));
    fs::write(early.dir.join("gate"), "").expect("open gate");
    let early = sb.wait_done("proj", "early", secs(15));
    sb.drop_prompt("proj", "held", "blocks on its gate\n");
    let held = sb.wait_state("proj", "held", "running", secs(15));

    // Rewritten after the daemon read its config: only the CLI sees it.
    sb.configure(
        &ConfigToml::new(&["/bin/sh", &script])
            .global("keep_runs", "0")
            .global("keep_days", "0"),
    );
    // The early job's monitor may still be letting go of its lock.
    wait_until("the early job to be removable", secs(10), || {
        let dry = gc_json(&sb, &["--dry-run"]);
        (paths(&dry, "run_dirs") == [early.dir.clone()]).then_some(())
    });
    let report = gc_json(&sb, &[]);
    assert_eq!(paths(&report, "run_dirs"), vec![early.dir.clone()]);
    assert_eq!(report["runs_active"], 1, "{report:#}");
    let still = sb.job(&held.id).expect("the running job's record survives");
    assert_eq!(still.state(), "running");

    fs::write(held.dir.join("gate"), "").expect("open gate");
    let held_done = sb.wait_done("proj", "held", secs(15));
    assert_eq!(held_done.state(), "succeeded", "{:#}", held_done.record);
    wait_until("the held job's monitor to let go", secs(10), || {
        let r = gc_json(&sb, &[]);
        (r["runs_removed"] == 1).then_some(())
    });
    assert!(!held.dir.exists(), "removed once it ended");
}

#[test]
fn unreadable_records_and_stray_entries_are_left_alone() {
    let sb = Sandbox::new();
    let jobs = finished_jobs(&sb, &["a"]);
    let corrupt = sb.run_dir("0190b6a0-0000-7000-8000-00000000dead");
    fs::create_dir_all(&corrupt).expect("corrupt dir");
    fs::write(corrupt.join("job.json"), "{\"state\": \"succ").expect("corrupt record");
    let no_record = sb.run_dir("0190b6a0-0000-7000-8000-00000000beef");
    fs::create_dir_all(&no_record).expect("dir without record");
    let stray = sb.runs().join(".not a job");
    fs::create_dir_all(&stray).expect("stray dir");
    fs::write(
        stray.join("job.json"),
        fs::read(jobs[0].dir.join("job.json")).expect("copy"),
    )
    .expect("stray record");
    let stray_file = sb.runs().join("notes.txt");
    fs::write(&stray_file, "hands off").expect("stray file");
    retention(&sb, 0, 0);

    let report = gc_json(&sb, &[]);
    assert_eq!(paths(&report, "run_dirs"), vec![jobs[0].dir.clone()]);
    assert_eq!(report["runs_skipped"], 2, "{report:#}");
    assert_eq!(
        fs::read_to_string(corrupt.join("job.json")).expect("corrupt record kept"),
        "{\"state\": \"succ"
    );
    for kept in [&no_record, &stray.join("job.json"), &stray_file] {
        assert!(kept.exists(), "{} left alone", kept.display());
    }
}

#[test]
fn artifacts_beyond_keep_artifacts_are_pruned_per_prompt() {
    let sb = Sandbox::new();
    let jobs = finished_jobs(&sb, &["a", "a", "a", "b"]);
    // Give every execution two artifacts, whatever the monitor recorded.
    let db = ledger(&sb);
    for job in &jobs {
        for kind in ["gc_test_one", "gc_test_two"] {
            db.execute(
                "INSERT OR IGNORE INTO execution_artifacts (execution_id, kind, content)
                 VALUES (?1, ?2, '{\"text\":\"x\",\"truncated\":false,\"bytes\":1}')",
                [job.id.as_str(), kind],
            )
            .expect("insert artifact");
        }
    }
    drop(db);
    let cfg = retention(&sb, 100, 0).global("keep_artifacts", "1");
    sb.configure(&cfg);
    let per_job = |id: &str| {
        count(
            &sb,
            &format!("SELECT count(*) FROM execution_artifacts WHERE execution_id = '{id}'"),
        )
    };
    let before: Vec<i64> = jobs.iter().map(|j| per_job(&j.id)).collect();

    let dry = gc_json(&sb, &["--dry-run"]);
    let would = dry["artifacts_removed"].as_i64().expect("count");
    assert_eq!(would, before[0] + before[1], "{dry:#}");
    assert_eq!(per_job(&jobs[0].id), before[0], "dry run deletes nothing");

    let report = gc_json(&sb, &[]);
    assert_eq!(report["artifacts_removed"], would, "{report:#}");
    assert_eq!(report["runs_removed"], 0, "run folders kept by keep_runs");
    let after: Vec<i64> = jobs.iter().map(|j| per_job(&j.id)).collect();
    assert_eq!(
        after,
        vec![0, 0, before[2], before[3]],
        "newest a and b keep theirs"
    );
    assert_eq!(count(&sb, "SELECT count(*) FROM executions"), 4);
}
