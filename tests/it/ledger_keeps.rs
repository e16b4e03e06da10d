//! What the ledger keeps beyond a run folder, and how its history is
//! read: the prompt's text (found by `history list --grep`, printed by
//! `history show --prompt`, outliving retention), retention set from the
//! environment for one run, statistics by prompt and by profile, a root
//! that does not exist yet, and an end recorded while another process
//! holds `ledger.db`.

use std::time::Instant;

use serde_json::Value;

use crate::support::*;

/// Runs `args`, expects exit `code`, returns stdout parsed as JSON.
fn json(sb: &Sandbox, args: &[&str], code: i32) -> Value {
    let out = sb.run(args);
    assert_eq!(out.code(), code, "{args:?}: {out:?}");
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?} printed invalid JSON ({e}): {}", out.stdout))
}

fn ids(rows: &Value) -> Vec<String> {
    rows.as_array()
        .unwrap_or_else(|| panic!("expected a JSON array: {rows}"))
        .iter()
        .map(|r| r["id"].as_str().expect("id").to_owned())
        .collect()
}

/// Runs one job per `(name, prompt)` under project `proj`, one after the
/// other, waits for each to be done and let go of, then stops the daemon.
fn run_jobs(sb: &Sandbox, cfg: &ConfigToml, prompts: &[(&str, &str)]) -> Vec<Job> {
    let prompts: Vec<(&str, &str, &str)> = prompts.iter().map(|(n, b)| ("proj", *n, *b)).collect();
    run_jobs_in(sb, cfg, &prompts)
}

/// [`run_jobs`] of `(project, name, prompt)`s.
fn run_jobs_in(sb: &Sandbox, cfg: &ConfigToml, prompts: &[(&str, &str, &str)]) -> Vec<Job> {
    sb.configure(cfg);
    let mut daemon = Daemon::start(sb);
    let mut done: Vec<Job> = Vec::new();
    for (project, name, body) in prompts {
        sb.drop_prompt(project, name, *body);
        let ids: Vec<String> = done.iter().map(|j| j.id.clone()).collect();
        let job = sb.wait_done_excluding(project, name, &ids, secs(15));
        wait_monitor_released(sb, &job.id, secs(10));
        done.push(job);
    }
    daemon.sigterm();
    daemon.wait_exit(secs(10));
    done
}

#[test]
fn the_prompt_text_is_found_by_grep_and_outlives_its_run_folder() {
    let sb = Sandbox::new();
    let jobs = run_jobs(
        &sb,
        &ConfigToml::new(&["true"]),
        &[
            ("parser", "Fix the FLAKY parser test\nand nothing else\n"),
            ("docs", "Write the user guide\n"),
        ],
    );
    let found = json(
        &sb,
        &["history", "list", "--grep", "flaky PARSER", "--json"],
        0,
    );
    assert_eq!(ids(&found), [jobs[0].id.clone()], "case ignored, substring");
    // What a limit leaves out is counted by the texts too: both hold "e".
    let out = sb.run(&["history", "list", "--grep", "E", "--limit", "1"]);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stderr.contains("1 more not shown"), "{out:?}");
    json(
        &sb,
        &["history", "list", "--grep", "no such words", "--json"],
        1,
    );
    let shown = json(&sb, &["history", "show", &jobs[1].id, "--json"], 0);
    assert_eq!(shown["prompt"]["text"], "Write the user guide\n");
    assert_eq!(shown["prompt"]["truncated"], false);

    // Retention set from the environment for this run removes both run
    // folders (the config keeps the defaults: 1000 runs, 30 days).
    let gc = sb.run_with_env(
        &["gc", "--json"],
        &[("JOBWARDEN_KEEP_RUNS", "0"), ("JOBWARDEN_KEEP_DAYS", "0")],
    );
    assert_eq!(gc.code(), 0, "{gc:?}");
    for j in &jobs {
        assert!(!j.dir.exists(), "run folder of {} removed by gc", j.id);
    }
    let text = sb.run(&["history", "show", &jobs[0].id, "--prompt"]);
    assert_eq!(text.code(), 0, "{text:?}");
    assert_eq!(text.stdout, "Fix the FLAKY parser test\nand nothing else\n");
    let found = json(
        &sb,
        &["history", "list", "--grep", "user guide", "--json"],
        0,
    );
    assert_eq!(ids(&found), [jobs[1].id.clone()], "still found after gc");
}

#[test]
fn a_row_without_a_kept_prompt_says_so_and_a_long_prompt_is_cut() {
    let sb = Sandbox::new();
    let long = format!("{}\n", "x".repeat(70 * 1024));
    let jobs = run_jobs(&sb, &ConfigToml::new(&["true"]), &[("long", &long)]);
    let shown = json(&sb, &["history", "show", &jobs[0].id, "--json"], 0);
    assert_eq!(shown["prompt"]["truncated"], true, "{}", shown["prompt"]);
    let kept = shown["prompt"]["text"].as_str().expect("text").len();
    assert_eq!(kept, 64 * 1024, "the first 64 KiB are kept");

    let out = sb.run(&["history", "record", "proj", "external", "success"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let rows = json(&sb, &["history", "list", "--name", "external", "--json"], 0);
    let id = &ids(&rows)[0];
    let human = sb.run(&["history", "show", id]);
    assert!(human.stdout.contains("not kept"), "{}", human.stdout);
    let text = sb.run(&["history", "show", id, "--prompt"]);
    assert_eq!(text.code(), 1, "{text:?}");
    assert!(text.stderr.contains("no prompt text"), "{}", text.stderr);
}

#[test]
fn a_retention_variable_with_a_bad_value_is_an_error_naming_it() {
    let sb = Sandbox::new();
    let jobs = run_jobs(&sb, &ConfigToml::new(&["true"]), &[("a", "a\n")]);
    let out = sb.run_with_env(&["gc"], &[("JOBWARDEN_KEEP_RUNS", "lots")]);
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(
        out.stderr.contains("JOBWARDEN_KEEP_RUNS") && out.stderr.contains("keep_runs"),
        "{}",
        out.stderr
    );
    assert!(jobs[0].dir.exists(), "nothing removed");
    // Only what prunes reads them: the other commands answer as ever.
    for args in [
        &["status"][..],
        &["jobs"],
        &["history", "list"],
        &["show", "proj/a"],
    ] {
        let out = sb.run_with_env(args, &[("JOBWARDEN_KEEP_RUNS", "lots")]);
        assert!(matches!(out.code(), 0 | 3), "{args:?}: {out:?}");
        assert!(
            !out.stderr.contains("JOBWARDEN_KEEP_RUNS"),
            "{args:?}: {out:?}"
        );
    }
}

#[test]
fn stats_count_failures_by_prompt_and_by_profile() {
    let sb = Sandbox::new();
    let cfg = ConfigToml::new(&["true"]).extra(
        "[profiles.breaks]\ncommand = [\"false\"]\n\n\
         [[route]]\nmatch = \"broken/**\"\nprofile = \"breaks\"\n",
    );
    run_jobs_in(
        &sb,
        &cfg,
        &[
            ("proj", "good", "g\n"),
            ("broken", "bad1", "b\n"),
            ("proj", "good", "g\n"),
            ("broken", "bad2", "b\n"),
        ],
    );
    let by_prompt = json(&sb, &["history", "stats", "--by", "prompt", "--json"], 0);
    assert_eq!(by_prompt["by"], "prompt");
    let good = &by_prompt["prompts"]["proj/good"];
    assert_eq!(good["total"], 2, "{by_prompt:#}");
    assert_eq!(good["success_rate"], 1.0);
    assert_eq!(
        by_prompt["prompts"]["broken/bad1"]["by_outcome"]["failure"],
        1
    );
    assert_eq!(by_prompt["prompts"]["broken/bad1"]["success_rate"], 0.0);
    let by_profile = json(&sb, &["history", "stats", "--by", "profile", "--json"], 0);
    assert_eq!(
        by_profile["profiles"]["breaks"]["total"], 2,
        "{by_profile:#}"
    );
    assert_eq!(by_profile["profiles"]["breaks"]["success_rate"], 0.0);
    assert_eq!(by_profile["profiles"]["default"]["success_rate"], 1.0);
    assert_eq!(by_profile["total"], 4);
    let human = sb.run(&["history", "stats", "--by", "profile"]);
    assert!(
        human
            .stdout
            .contains("profile breaks: total 2, success rate 0.0%"),
        "{}",
        human.stdout
    );
    let default = json(&sb, &["history", "stats", "--json"], 0);
    assert_eq!(
        default["projects"]["proj"]["total"], 2,
        "by project as before"
    );
    assert_eq!(default["projects"]["broken"]["total"], 2);
}

#[test]
fn record_makes_a_missing_root_and_check_on_one_names_it() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["true"]));
    std::fs::remove_dir(&sb.root).expect("the root is empty");
    let check = sb.run(&["history", "check", "proj", "task"]);
    assert_eq!(check.code(), 2, "{check:?}");
    assert!(
        check.stderr.contains(&sb.root.display().to_string())
            && check.stderr.contains("no jobwarden root at"),
        "{}",
        check.stderr
    );
    assert!(!sb.root.exists(), "check makes nothing");
    let record = sb.run(&["history", "record", "proj", "task", "failure"]);
    assert_eq!(record.code(), 0, "{record:?}");
    assert!(sb.root.join("ledger.db").is_file(), "root and ledger made");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&sb.root)
        .expect("root")
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o007,
        0,
        "the daemon's permissions (0770 less the umask): {mode:o}"
    );
    let check = sb.run(&["history", "check", "proj", "task", "--cooldown", "600"]);
    assert_eq!(
        check.code(),
        0,
        "in cooldown after the recorded failure: {check:?}"
    );
}

#[test]
fn an_end_recorded_while_the_ledger_is_locked_keeps_the_jobs_own_duration() {
    let sb = Sandbox::new();
    // A failure that may be retried: its monitor decides the retry from
    // the ledger as the job ends.
    let cfg = ConfigToml::new(&["/bin/sh", "-c", "sleep 1; exit 3"])
        .profile("max_attempts", "2")
        .profile("cooldown", "\"1h\"");
    sb.configure(&cfg);
    let mut daemon = Daemon::start(&sb);
    // Make the ledger exist, then hold it while the job runs and ends.
    let warm = sb.run(&["history", "list", "--json"]);
    assert_eq!(warm.code(), 1, "{warm:?}");
    let conn = rusqlite::Connection::open(sb.root.join("ledger.db")).expect("open ledger");
    conn.execute_batch("BEGIN EXCLUSIVE")
        .expect("lock the ledger");
    sb.drop_prompt("proj", "nap", "sleep\n");
    let job = sb.wait_state("proj", "nap", "running", secs(15));
    let started = Instant::now();
    // Held past the job's end (1 s) and past the 5 s its monitor waits for
    // the ledger, until 7 s: an end stamped when it was written says 6 s.
    wait_until("7 s to pass with the ledger held", secs(12), || {
        (started.elapsed() >= secs(7)).then_some(())
    });
    conn.execute_batch("COMMIT").expect("release the ledger");
    drop(conn);
    let row = wait_row(&sb, &job.id);
    let ms = row["duration_ms"].as_u64().expect("a duration");
    assert!(
        (900..2500).contains(&ms),
        "the job's 1 s, not the wait: {row:#}"
    );
    daemon.sigterm();
    daemon.wait_exit(secs(10));
}

#[test]
fn a_row_recorded_with_an_older_clock_is_still_the_newest_and_impossible_times_are_named() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["true"]));
    let record = |outcome: &str, extra: &[&str]| {
        let mut args = vec!["history", "record", "proj", "task", outcome];
        args.extend_from_slice(extra);
        sb.run(&args)
    };
    assert_eq!(record("success", &[]).code(), 0);
    // Recorded next, by a clock an hour behind the first row's.
    let out = record("failure", &["--started-at", "2h", "--finished-at", "1h"]);
    assert_eq!(out.code(), 0, "{out:?}");
    let rows = json(&sb, &["history", "list", "--json"], 0);
    let newest = &rows[0];
    assert_eq!(newest["outcome"], "failure", "the ledger's order: {rows:#}");
    assert_eq!(newest["duration_ms"], 3_600_000);
    let check = sb.run(&["history", "check", "proj", "task", "--cooldown", "86400"]);
    assert_eq!(check.code(), 0, "the failure is the last run: {check:?}");
    let status = json(&sb, &["status", "--json"], 3);
    assert_eq!(
        status["needs_attention"][0]["outcome"], "failure",
        "{status:#}"
    );

    let out = record("success", &["--finished-at", "1970-01-01T00:00:05Z"]);
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(
        out.stderr.contains("impossible time")
            && out.stderr.contains("1970-01-01T00:00:05")
            && !out.stderr.contains("Invalid parameter"),
        "{}",
        out.stderr
    );
    let out = record("success", &["--started-at", "1h", "--finished-at", "2h"]);
    assert_eq!(out.code(), 2, "{out:?}");
    assert!(
        out.stderr.contains("is after --finished-at"),
        "{}",
        out.stderr
    );
    assert_eq!(
        json(&sb, &["history", "list", "--json"], 0)
            .as_array()
            .map(Vec::len),
        Some(2)
    );
}

#[test]
fn a_diagnostic_is_fixed_by_a_later_run_of_another_prompt_in_the_same_working_folder() {
    let sb = Sandbox::new();
    let work = sb.base.join("work");
    std::fs::create_dir_all(&work).expect("workdir");
    // `break` prints a compiler error and fails; `mend` compiles cleanly:
    // two prompts, one working folder.
    let script = sb.script(
        "job",
        r#"if [ "$JOBWARDEN_NAME" = break ]; then
  echo 'error[E0425]: cannot find value `x` in this scope' >&2
  echo ' --> src/main.rs:2:13' >&2
  exit 101
fi
echo compiled"#,
    );
    let cfg =
        ConfigToml::new(&["/bin/sh", &script]).profile("workdir", &q(&work.to_string_lossy()));
    let jobs = run_jobs(&sb, &cfg, &[("break", "b\n"), ("mend", "m\n")]);
    let hits = json(
        &sb,
        &["history", "diagnostics", "--code", "E0425", "--json"],
        0,
    );
    assert_eq!(hits[0]["id"], jobs[0].id.as_str(), "{hits:#}");
    assert_eq!(
        hits[0]["resolved_by"]["id"],
        jobs[1].id.as_str(),
        "{hits:#}"
    );
}

#[test]
fn a_prompt_copy_a_job_replaced_with_a_fifo_or_a_link_is_not_kept_and_nothing_hangs() {
    let sb = Sandbox::new();
    let secret = sb.base.join("secret.txt");
    std::fs::write(&secret, "not for the ledger\n").expect("secret");
    let script = sb.script(
        "job",
        &format!(
            r#"rm -f "$JOBWARDEN_RUN_DIR/prompt.md"
if [ "$JOBWARDEN_NAME" = fifo ]; then mkfifo "$JOBWARDEN_RUN_DIR/prompt.md"
else ln -s {} "$JOBWARDEN_RUN_DIR/prompt.md"; fi"#,
            q(&secret.to_string_lossy())
        ),
    );
    let cfg = ConfigToml::new(&["/bin/sh", &script]).unsandboxed();
    let jobs = run_jobs(&sb, &cfg, &[("fifo", "one\n"), ("link", "two\n")]);
    for j in &jobs {
        let row = wait_row(&sb, &j.id);
        assert_eq!(row["outcome"], "success", "{row:#}");
        assert!(row["prompt"].is_null(), "nothing kept through it: {row:#}");
    }
    json(
        &sb,
        &["history", "list", "--grep", "not for the ledger", "--json"],
        1,
    );
}
