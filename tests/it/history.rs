//! `jobwarden history list|show|stats|export|who-touched` against real
//! ledgers: rows seeded through the real CLI (`history record`) and through
//! real daemon jobs, then read back through the same binary. Covers filters
//! combining, input validation (exit 2), clean "no" answers (exit 1), the
//! numbers `stats` reports, project isolation, both export formats, path
//! lookups and every `--json` shape (docs/history-json.md).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::*;

/// The fields of one execution in every `--json` output.
const EXECUTION_FIELDS: &[&str] = &[
    "id",
    "project",
    "name",
    "attempt",
    "retry_of",
    "profile",
    "outcome",
    "exit_code",
    "signal",
    "failure_stage",
    "error_message",
    "result_ref",
    "host",
    "started_at",
    "finished_at",
    "duration_ms",
    "disposition",
    "source",
];

const OUTCOMES: &[&str] = &[
    "success",
    "failure",
    "timeout",
    "rate_limited",
    "aborted",
    "interrupted",
    "rejected",
    "cancelled",
    "setup_failed",
];

/// A sandbox with a config whose jobs do nothing (for CLI-only tests).
fn sandbox() -> Sandbox {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["/bin/true"]));
    sb
}

/// `history record`, which must succeed.
fn record(sb: &Sandbox, project: &str, name: &str, outcome: &str, extra: &[&str]) {
    let mut args = vec!["history", "record", project, name, outcome];
    args.extend_from_slice(extra);
    let out = sb.run(&args);
    assert_eq!(out.code(), 0, "record {args:?}: {out:?}");
}

/// Runs `args`, expects exit `code`, returns stdout parsed as JSON.
fn json(sb: &Sandbox, args: &[&str], code: i32) -> Value {
    let out = sb.run(args);
    assert_eq!(out.code(), code, "{args:?}: {out:?}");
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?} printed invalid JSON ({e}): {}", out.stdout))
}

fn array(v: &Value) -> &Vec<Value> {
    v.as_array()
        .unwrap_or_else(|| panic!("expected a JSON array: {v}"))
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .unwrap_or_else(|| panic!("expected a JSON object: {v}"))
        .keys()
        .cloned()
        .collect()
}

fn field_set(extra: &[&str]) -> BTreeSet<String> {
    EXECUTION_FIELDS
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect()
}

/// Asserts `v` is one execution object with exactly the documented fields
/// (plus `extra`) and well-formed times.
fn assert_execution_shape(v: &Value, extra: &[&str]) {
    assert_eq!(keys(v), field_set(extra), "fields of {v:#}");
    parse_rfc3339_ms(v["finished_at"].as_str().expect("finished_at is a string"));
    if let Some(started) = v["started_at"].as_str() {
        parse_rfc3339_ms(started);
    }
    assert!(
        OUTCOMES.contains(&v["outcome"].as_str().unwrap_or("")),
        "{v}"
    );
    assert!(v["attempt"].as_u64().is_some_and(|a| a >= 1), "{v}");
}

fn ids(rows: &[Value]) -> Vec<String> {
    rows.iter()
        .map(|r| r["id"].as_str().expect("id").to_string())
        .collect()
}

#[test]
fn list_filters_combine_project_outcome_and_limit() {
    let sb = sandbox();
    for outcome in ["failure", "success", "failure", "failure"] {
        record(&sb, "p1", "task", outcome, &["--exit-code", "1"]);
    }
    record(&sb, "p2", "task", "failure", &[]);
    record(&sb, "p1", "other", "success", &[]);

    let rows = json(
        &sb,
        &[
            "history",
            "list",
            "--project",
            "p1",
            "--outcome",
            "failure",
            "--limit",
            "2",
            "--json",
        ],
        0,
    );
    let rows = array(&rows);
    assert_eq!(rows.len(), 2, "limit 2 of 3 matching: {rows:#?}");
    for r in rows {
        assert_execution_shape(r, &[]);
        assert_eq!(r["project"], "p1");
        assert_eq!(r["outcome"], "failure");
        assert_eq!(r["source"], "external");
    }
    let newest_first = parse_rfc3339_ms(rows[0]["finished_at"].as_str().expect("time"))
        >= parse_rfc3339_ms(rows[1]["finished_at"].as_str().expect("time"));
    assert!(newest_first, "newest first: {rows:#?}");

    let all = json(&sb, &["history", "list", "--json"], 0);
    assert_eq!(array(&all).len(), 6);
    let named = json(&sb, &["history", "list", "--name", "other", "--json"], 0);
    assert_eq!(ids(array(&named)).len(), 1);
}

#[test]
fn list_human_table_fits_80_columns_and_names_prompts() {
    let sb = sandbox();
    record(&sb, "p1", "task", "rate_limited", &["--attempt", "3"]);
    let out = sb.run(&["history", "list"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "header and one row: {:?}", out.stdout);
    assert!(lines[0].starts_with("ID"), "{:?}", lines[0]);
    assert!(lines[1].contains("p1/task") && lines[1].contains("rate_limited"));
    for line in lines {
        assert!(line.chars().count() <= 80, "too wide: {line:?}");
    }
}

#[test]
fn list_since_accepts_durations_and_rfc3339() {
    let sb = sandbox();
    record(&sb, "p", "a", "success", &[]);
    let recent = json(&sb, &["history", "list", "--since", "1h", "--json"], 0);
    assert_eq!(array(&recent).len(), 1);
    let old = "2000-01-01T00:00:00+02:00";
    assert_eq!(
        array(&json(
            &sb,
            &["history", "list", "--since", old, "--json"],
            0
        ))
        .len(),
        1
    );
    let future = "2999-01-01T00:00:00Z";
    let none = json(&sb, &["history", "list", "--since", future, "--json"], 1);
    assert_eq!(none, Value::Array(vec![]));
}

#[test]
fn list_since_invalid_value_exits_2_naming_it() {
    let sb = sandbox();
    let out = sb.run(&["history", "list", "--since", "last-tuesday"]);
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(out.stderr.contains("last-tuesday"), "{}", out.stderr);
    assert!(
        out.stderr.contains("12h") && out.stderr.contains("RFC 3339"),
        "names the valid forms: {}",
        out.stderr
    );
    let stats = sb.run(&["history", "stats", "--since", "soon"]);
    assert_eq!(stats.code(), 2, "{stats:?}");
    assert!(stats.stderr.contains("soon"), "{}", stats.stderr);
}

#[test]
fn list_unknown_outcome_exits_2_listing_valid_ones() {
    let sb = sandbox();
    let out = sb.run(&["history", "list", "--outcome", "exploded", "--json"]);
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(out.stdout.is_empty(), "nothing on stdout: {:?}", out.stdout);
    assert!(out.stderr.contains("exploded"), "{}", out.stderr);
    for valid in OUTCOMES {
        assert!(out.stderr.contains(valid), "lists {valid}: {}", out.stderr);
    }
}

#[test]
fn list_nothing_matched_exits_1_in_both_forms() {
    let sb = sandbox();
    record(&sb, "p", "a", "success", &[]);
    let human = sb.run(&["history", "list", "--outcome", "timeout"]);
    assert_eq!(human.code(), 1, "{human:?}");
    assert!(human.stdout.contains("no executions matched"), "{human:?}");
    let empty = json(&sb, &["history", "list", "--project", "nope", "--json"], 1);
    assert_eq!(empty, Value::Array(vec![]));
}

#[test]
fn show_unknown_id_exits_1_naming_it() {
    let sb = sandbox();
    let id = "0190aaaa-bbbb-7ccc-8ddd-eeeeeeeeeeee";
    for args in [
        vec!["history", "show", id],
        vec!["history", "show", id, "--json"],
    ] {
        let out = sb.run(&args);
        assert_eq!(out.code(), 1, "{out:?}");
        assert!(out.stdout.is_empty(), "{out:?}");
        assert!(out.stderr.contains(id), "names the id: {}", out.stderr);
    }
}

#[test]
fn show_malformed_id_exits_2() {
    let sb = sandbox();
    for bad in ["../etc/passwd", "a/../b", "-x"] {
        let out = sb.run(&["history", "show", bad]);
        assert_eq!(out.code(), 2, "{bad:?}: {out:?}");
        assert!(out.stderr.contains(bad), "names {bad:?}: {}", out.stderr);
    }
    // A prompt's name may hold a space: not malformed, only not there.
    let out = sb.run(&["history", "show", "a b"]);
    assert_eq!(out.code(), 1, "{out:?}");
}

#[test]
fn show_json_of_a_recorded_run_has_the_documented_shape() {
    let sb = sandbox();
    record(
        &sb,
        "p",
        "a",
        "failure",
        &["--exit-code", "7", "--attempt", "2"],
    );
    let list = json(&sb, &["history", "list", "--json"], 0);
    let id = ids(array(&list)).remove(0);
    let shown = json(&sb, &["history", "show", &id, "--json"], 0);
    let extra = [
        "command",
        "workdir",
        "prompt_sha256",
        "prompt",
        "published",
        "slurm",
        "artifacts",
        "paths",
    ];
    assert_execution_shape(&shown, &extra);
    assert!(shown["slurm"].is_null(), "it ran here: {shown:#}");
    assert!(
        shown["prompt"].is_null(),
        "a recorded run keeps no prompt: {shown:#}"
    );
    assert_eq!(shown["id"], id.as_str());
    assert_eq!(shown["exit_code"], 7);
    assert_eq!(shown["attempt"], 2);
    assert_eq!(shown["artifacts"], Value::Array(vec![]));
    assert_eq!(shown["paths"], Value::Array(vec![]));
    let human = sb.run(&["history", "show", &id]);
    assert_eq!(human.code(), 0, "{human:?}");
    assert!(
        human.stdout.contains("failure (exit 7)"),
        "{}",
        human.stdout
    );
}

#[test]
fn stats_counts_outcomes_and_success_rate_from_known_seeds() {
    let sb = sandbox();
    let seeds = [
        ("success", 3),
        ("failure", 1),
        ("timeout", 1),
        ("aborted", 2),
        ("rejected", 1),
        ("cancelled", 1),
    ];
    for (outcome, n) in seeds {
        for _ in 0..n {
            record(&sb, "p", "a", outcome, &[]);
        }
    }
    let stats = json(&sb, &["history", "stats", "--json"], 0);
    assert_eq!(stats["total"], 9);
    assert_eq!(
        keys(&stats["by_outcome"]),
        OUTCOMES.iter().map(|s| s.to_string()).collect()
    );
    for (outcome, n) in seeds {
        assert_eq!(stats["by_outcome"][outcome], n, "{outcome}: {stats:#}");
    }
    assert_eq!(stats["by_outcome"]["interrupted"], 0, "zero counts present");
    // 3 successes of 9 - 2 aborted - 1 rejected - 1 cancelled = 5 decided runs.
    let rate = stats["success_rate"].as_f64().expect("a rate");
    assert!((rate - 0.6).abs() < 1e-9, "{rate}");
    assert_eq!(stats["with_duration"], 0, "recorded runs have no duration");
    assert!(stats["median_duration_ms"].is_null() && stats["p95_duration_ms"].is_null());
    assert_eq!(stats["projects"]["p"]["total"], 9);
    assert!(stats["since"].is_null() && stats["project"].is_null());
}

#[test]
fn stats_success_rate_is_null_when_only_aborted_and_rejected() {
    let sb = sandbox();
    record(&sb, "p", "a", "aborted", &[]);
    record(&sb, "p", "a", "rejected", &[]);
    let stats = json(&sb, &["history", "stats", "--json"], 0);
    assert!(stats["success_rate"].is_null(), "{stats:#}");
    let empty = json(&sb, &["history", "stats", "--project", "none", "--json"], 0);
    assert_eq!(empty["total"], 0);
    assert!(empty["success_rate"].is_null(), "{empty:#}");
    assert_eq!(empty["projects"], serde_json::json!({}));
}

#[test]
fn stats_since_window_excludes_older_runs() {
    let sb = sandbox();
    record(&sb, "p", "a", "success", &[]);
    let future = "2999-01-01T00:00:00Z";
    let later = json(&sb, &["history", "stats", "--since", future, "--json"], 0);
    assert_eq!(later["total"], 0, "{later:#}");
    parse_rfc3339_ms(later["since"].as_str().expect("since echoed"));
    let recent = json(&sb, &["history", "stats", "--since", "12h", "--json"], 0);
    assert_eq!(recent["total"], 1, "{recent:#}");
}

#[test]
fn projects_are_isolated_in_every_query() {
    let sb = sandbox();
    for _ in 0..3 {
        record(&sb, "alpha", "task", "success", &[]);
    }
    record(&sb, "beta", "task", "failure", &[]);
    let alpha = json(&sb, &["history", "list", "--project", "alpha", "--json"], 0);
    assert_eq!(array(&alpha).len(), 3);
    assert!(array(&alpha).iter().all(|r| r["project"] == "alpha"));

    let stats = json(&sb, &["history", "stats", "--project", "beta", "--json"], 0);
    assert_eq!(stats["total"], 1);
    assert_eq!(stats["by_outcome"]["failure"], 1);
    assert_eq!(stats["success_rate"], 0.0);
    assert_eq!(
        keys(&stats["projects"]),
        BTreeSet::from(["beta".to_string()])
    );

    let all = json(&sb, &["history", "stats", "--json"], 0);
    assert_eq!(all["projects"]["alpha"]["success_rate"], 1.0);
    assert_eq!(all["projects"]["beta"]["success_rate"], 0.0);

    let nw = json(&sb, &["history", "export", "--format", "night-watch"], 0);
    assert_eq!(array(&nw["alpha"]["task"]["records"]).len(), 3);
    assert_eq!(array(&nw["beta"]["task"]["records"]).len(), 1);
}

#[test]
fn night_watch_export_keeps_the_newest_10_of_12_oldest_first() {
    let sb = sandbox();
    for attempt in 1..=12 {
        let a = attempt.to_string();
        record(
            &sb,
            "proj",
            "prd",
            "failure",
            &["--attempt", &a, "--exit-code", "1"],
        );
    }
    record(&sb, "proj", "other", "success", &["--exit-code", "0"]);
    let nw = json(&sb, &["history", "export", "--format", "night-watch"], 0);
    assert_eq!(keys(&nw), BTreeSet::from(["proj".to_string()]));
    let records = array(&nw["proj"]["prd"]["records"]);
    let attempts: Vec<u64> = records
        .iter()
        .filter_map(|r| r["attempt"].as_u64())
        .collect();
    assert_eq!(attempts, (3..=12).collect::<Vec<u64>>(), "{records:#?}");
    for r in records {
        assert_eq!(
            keys(r),
            ["attempt", "exitCode", "outcome", "timestamp"]
                .map(String::from)
                .into()
        );
        assert_eq!(r["outcome"], "failure");
        assert_eq!(r["exitCode"], 1);
        let ts = r["timestamp"].as_u64().expect("epoch seconds");
        assert!(
            ts > 1_600_000_000 && ts < 10_000_000_000,
            "seconds, not ms: {ts}"
        );
    }
    let other = array(&nw["proj"]["other"]["records"]);
    assert_eq!(other.len(), 1);
    assert_eq!(other[0]["exitCode"], 0);
}

#[test]
fn json_export_is_valid_json_with_every_row() {
    let sb = sandbox();
    let empty = json(&sb, &["history", "export"], 0);
    assert_eq!(empty, Value::Array(vec![]));
    for (project, outcome) in [("a", "success"), ("b", "failure"), ("", "timeout")] {
        for _ in 0..2 {
            record(&sb, project, "n", outcome, &[]);
        }
    }
    let export = json(&sb, &["history", "export", "--format", "json"], 0);
    let rows = array(&export);
    assert_eq!(rows.len(), 6);
    for r in rows {
        assert_execution_shape(r, &[]);
    }
    let listed = json(&sb, &["history", "list", "--json"], 0);
    let mut want = ids(array(&listed));
    want.reverse();
    assert_eq!(ids(rows), want, "every row, oldest first");
}

#[test]
fn export_unknown_format_exits_2_naming_the_valid_ones() {
    let sb = sandbox();
    let out = sb.run(&["history", "export", "--format", "csv"]);
    assert_eq!(out.code(), 2, "{out:?}");
    for word in ["csv", "json", "night-watch"] {
        assert!(out.stderr.contains(word), "{word}: {}", out.stderr);
    }
}

// ---- rows written by real daemon jobs ----------------------------------

/// A sandbox whose jobs run in `<base>/work` and run `body`.
fn daemon_sandbox(body: &str) -> (Sandbox, PathBuf) {
    let sb = Sandbox::new();
    let work = sb.base.join("work");
    fs::create_dir_all(&work).expect("create workdir");
    let script = sb.script("job", body);
    let workdir = q(&work.to_string_lossy());
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]).profile("workdir", &workdir));
    (sb, work)
}

#[test]
fn show_and_stats_report_a_daemon_run_with_tails_and_duration() {
    let (sb, _work) = daemon_sandbox("echo out-line; echo err-line >&2; sleep 0.2; exit 3");
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "task", "do it");
    let job = sb.wait_done("proj", "task", secs(15));
    let row = wait_row(&sb, &job.id);

    assert_eq!(row["outcome"], "failure", "{row:#}");
    assert_eq!(row["exit_code"], 3);
    assert_eq!(row["source"], "daemon");
    let duration = row["duration_ms"]
        .as_u64()
        .expect("a daemon run has a duration");
    assert!(duration >= 200, "{duration}");
    let kinds: Vec<&str> = array(&row["artifacts"])
        .iter()
        .map(|a| a["kind"].as_str().unwrap_or(""))
        .collect();
    assert!(kinds.contains(&"stdout_tail"), "{row:#}");
    for a in array(&row["artifacts"]) {
        assert_eq!(
            keys(&a["content"]),
            ["bytes", "text", "truncated"].map(String::from).into()
        );
    }
    let stdout = array(&row["artifacts"])
        .iter()
        .find(|a| a["kind"] == "stdout_tail");
    let text = stdout
        .and_then(|a| a["content"]["text"].as_str())
        .unwrap_or("");
    assert!(text.contains("out-line"), "{row:#}");

    let stats = json(&sb, &["history", "stats", "--json"], 0);
    assert_eq!(stats["with_duration"], 1);
    assert_eq!(stats["median_duration_ms"], duration);
    assert_eq!(stats["p95_duration_ms"], duration);
    assert_eq!(stats["projects"]["proj"]["median_duration_ms"], duration);
}

/// Runs one job of `proj/name` to completion and waits for its row.
fn run_job(sb: &Sandbox, name: &str) -> String {
    sb.drop_prompt("proj", name, "touch things");
    let job = sb.wait_done("proj", name, secs(15));
    wait_row(sb, &job.id);
    job.id
}

/// `who-touched <path> --json`, with the exit code it must have.
fn touched(sb: &Sandbox, path: &Path, code: i32) -> Vec<Value> {
    let p = path.to_string_lossy();
    array(&json(sb, &["history", "who-touched", &p, "--json"], code)).clone()
}

#[test]
fn who_touched_finds_a_file_and_everything_under_a_folder() {
    let body = r#"printf 'src/a.txt\n' > "$JOBWARDEN_RUN_DIR/affected""#;
    let (sb, work) = daemon_sandbox(body);
    let _d = Daemon::start(&sb);
    let id = run_job(&sb, "toucher");

    let file = touched(&sb, &work.join("src/a.txt"), 0);
    assert_eq!(ids(&file), vec![id.clone()]);
    assert_execution_shape(&file[0], &["paths"]);
    let want = serde_json::json!([{"relation": "affected", "path": work.join("src/a.txt")}]);
    assert_eq!(file[0]["paths"], want);

    let folder = touched(&sb, &work.join("src"), 0);
    assert_eq!(
        ids(&folder),
        vec![id.clone()],
        "a folder matches what is under it"
    );
    let with_slash = format!("{}/", work.join("src").display());
    assert_eq!(touched(&sb, Path::new(&with_slash), 0).len(), 1);

    // The workdir itself was executed on, and everything listed is under it.
    let whole = touched(&sb, &work, 0);
    let relations: Vec<&str> = array(&whole[0]["paths"])
        .iter()
        .map(|p| p["relation"].as_str().unwrap_or(""))
        .collect();
    assert!(
        relations.contains(&"executed_on") && relations.contains(&"affected"),
        "{whole:#?}"
    );
}

#[test]
fn who_touched_prefix_is_a_folder_boundary_not_a_pattern() {
    let body = r#"printf 'dir_1/f.txt\nsrcdir/x.txt\n' > "$JOBWARDEN_RUN_DIR/affected""#;
    let (sb, work) = daemon_sandbox(body);
    let _d = Daemon::start(&sb);
    let id = run_job(&sb, "toucher");

    // "src" is a string prefix of "srcdir" but not a folder above it.
    assert!(touched(&sb, &work.join("src"), 1).is_empty());
    // '_' and '%' are LIKE wildcards; here they are plain characters.
    assert!(touched(&sb, &work.join("dirx1"), 1).is_empty());
    assert!(touched(&sb, &work.join("dir%"), 1).is_empty());
    assert_eq!(ids(&touched(&sb, &work.join("dir_1"), 0)), vec![id]);
    let out = sb.run(&[
        "history",
        "who-touched",
        &work.join("nowhere").to_string_lossy(),
    ]);
    assert_eq!(out.code(), 1, "{out:?}");
    assert!(out.stdout.contains("no recorded execution"), "{out:?}");
}

#[test]
fn who_touched_resolves_a_relative_path_against_the_current_folder() {
    let body = r#"printf 'src/a.txt\n' > "$JOBWARDEN_RUN_DIR/affected""#;
    let (sb, work) = daemon_sandbox(body);
    let _d = Daemon::start(&sb);
    let id = run_job(&sb, "toucher");

    let out = sb
        .command(&["history", "who-touched", "src/a.txt", "--json"])
        .current_dir(&work)
        .output()
        .expect("run who-touched");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let rows: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(ids(array(&rows)), vec![id]);
    let human = sb
        .command(&["history", "who-touched", "src"])
        .current_dir(&work)
        .output()
        .expect("run who-touched");
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains("affected") && text.contains("proj/toucher"),
        "{text}"
    );
}
