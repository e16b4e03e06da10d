//! The ledger as the daemon uses it: every finished attempt recorded,
//! cooldowns deferring claims, retries up to `max_attempts`, rate-limit
//! rules, the script interface (`history check` / `record`) and repair.

use std::fs;
use std::process::Command;

use crate::support::*;

/// A failing command whose prompt may be retried once, cooling 1.5 s.
fn failing_twice(sb: &Sandbox) -> ConfigToml {
    let script = sb.script(
        "fail",
        r#"echo "run $JOBWARDEN_ATTEMPT" >> "$OUT/runs.txt"; exit 3"#,
    );
    ConfigToml::new(&["/bin/sh", &script])
        .profile("max_attempts", "2")
        .profile("cooldown", "\"1500ms\"")
}

#[test]
fn failed_attempt_is_retried_after_its_cooldown_then_archived_as_failed() {
    let sb = Sandbox::new();
    sb.configure(&failing_twice(&sb));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "flaky", "try me\n");

    let first = wait_until("the first attempt to end", secs(15), || {
        sb.jobs_for("proj", "flaky")
            .into_iter()
            .find(Job::is_terminal)
    });
    let second = sb.wait_done_excluding("proj", "flaky", std::slice::from_ref(&first.id), secs(15));
    assert_eq!(first.state(), "failed");
    assert_eq!(
        first.str_field("disposition"),
        Some("requeued"),
        "{:#}",
        first.record
    );
    assert_eq!(second.int_field("attempt"), Some(2));
    assert_eq!(second.str_field("retry_of"), Some(first.id.as_str()));
    let gap = second.time_ms("started_at") - first.time_ms("finished_at");
    assert!(gap >= 1400, "the retry waited out the cooldown ({gap} ms)");
    assert_eq!(second.str_field("disposition"), Some("archived"));
    assert!(
        sb.root
            .join(second.str_field("archive_path").expect("archived"))
            .is_file()
    );
    assert_never("a third attempt", millis(2500), || {
        sb.jobs_for("proj", "flaky").len() > 2
    });
    let runs = fs::read_to_string(sb.out().join("runs.txt")).expect("runs");
    assert_eq!(runs, "run 1\nrun 2\n");
}

#[test]
fn failed_prompt_dropped_again_is_deferred_until_its_cooldown_ends() {
    let sb = Sandbox::new();
    let script = sb.script("fail", "exit 1");
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]).profile("cooldown", "\"2s\""));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "again", "first\n");
    let first = sb.wait_done("proj", "again", secs(15));
    assert_eq!(first.str_field("outcome"), Some("failure"));

    let waiting = sb.drop_prompt("proj", "again", "second\n");
    assert_never("a claim during the cooldown", millis(1000), || {
        !waiting.exists()
    });
    let out = sb.run(&["history", "check", "proj", "again"]);
    assert_eq!(out.code(), 0, "check says: in cooldown ({})", out.stderr);
    assert!(out.stdout.is_empty(), "check prints nothing on stdout");
    let second = sb.wait_done_excluding("proj", "again", std::slice::from_ref(&first.id), secs(10));
    assert!(second.time_ms("created_at") - first.time_ms("finished_at") >= 1900);
    assert_eq!(
        second.int_field("attempt"),
        Some(1),
        "a fresh drop, not a retry"
    );
}

#[test]
fn success_and_abort_never_defer() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]).profile("cooldown", "\"1h\""));
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "fine", "one\n");
    let first = sb.wait_done("proj", "fine", secs(15));
    sb.drop_prompt("proj", "fine", "two\n");
    let second = sb.wait_done_excluding("proj", "fine", std::slice::from_ref(&first.id), secs(5));
    assert_eq!(second.state(), "succeeded");
    assert_eq!(
        sb.run(&["history", "check", "proj", "fine"]).code(),
        1,
        "eligible"
    );
}

#[test]
fn rate_limit_rule_turns_a_failure_into_rate_limited_with_its_own_cooldown() {
    let sb = Sandbox::new();
    let script = sb.script("limited", "echo 'HTTP 429: slow down' >&2; exit 1");
    let cfg = ConfigToml::new(&["/bin/sh", &script])
        .profile("cooldown", "\"1h\"")
        .profile(
            "rate_limit",
            "{ patterns = [\"HTTP 429\"], cooldown = \"1s\" }",
        );
    sb.configure(&cfg);
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "busy", "x\n");
    let first = sb.wait_done("proj", "busy", secs(15));
    assert_eq!(first.state(), "failed", "the job record keeps its state");
    assert_eq!(first.str_field("outcome"), Some("rate_limited"));
    sb.drop_prompt("proj", "busy", "y\n");
    // The 1 s rate-limit cooldown applies, not the profile's 1 h.
    let second = sb.wait_done_excluding("proj", "busy", std::slice::from_ref(&first.id), secs(10));
    assert_eq!(second.str_field("outcome"), Some("rate_limited"));
}

#[test]
fn check_and_record_speak_in_exit_codes() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["true"]));
    assert_eq!(
        sb.run(&["history", "check", "proj", "p"]).code(),
        1,
        "no history: eligible"
    );
    let rec = sb.run(&[
        "history",
        "record",
        "proj",
        "p",
        "failure",
        "--exit-code",
        "2",
    ]);
    assert_eq!(rec.code(), 0, "{}", rec.stderr);
    assert_eq!(
        sb.run(&["history", "check", "proj", "p", "--cooldown", "3600"])
            .code(),
        0
    );
    assert_eq!(
        sb.run(&["history", "check", "proj", "p", "--cooldown", "0"])
            .code(),
        1
    );
    assert_eq!(
        sb.run(&["history", "check", "other", "p", "--cooldown", "3600"])
            .code(),
        1,
        "projects are isolated"
    );
    let bad = sb.run(&["history", "record", "proj", "p", "exploded"]);
    assert_eq!(bad.code(), 2);
    assert!(
        bad.stderr.contains("rate_limited") && bad.stderr.contains("success"),
        "{}",
        bad.stderr
    );
    assert_eq!(
        sb.run(&["history", "check", "../x", "p"]).code(),
        2,
        "names are validated"
    );
    assert!(sb.run(&["history", "check", "proj", "p"]).stdout.is_empty());
    let typo = sb
        .command(&["history", "check", "proj", "p"])
        .arg("--root")
        .arg(sb.base.join("typo"))
        .output()
        .expect("run");
    assert_eq!(
        typo.status.code(),
        Some(2),
        "a missing root is an error, not 'eligible'"
    );
    assert!(!sb.base.join("typo").exists(), "and nothing is created");
    let since = sb.run(&["history", "list", "--since", "éééx"]);
    assert_eq!(
        since.code(),
        2,
        "bad --since is a usage error, never a panic: {}",
        since.stderr
    );
}

#[test]
fn concurrent_records_from_eight_processes_lose_nothing() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["true"]));
    // No ledger yet: the eight first writers race to create its schema.
    assert!(!sb.root.join("ledger.db").exists());
    let children: Vec<_> = (0..8)
        .map(|i| {
            let script = format!(
                "for n in $(seq 25); do {bin} --root {root} --config {cfg} history record proj p{i} success || exit 1; done",
                bin = BIN,
                root = sb.root.display(),
                cfg = sb.config.display()
            );
            Command::new("/bin/sh").arg("-c").arg(script).spawn().expect("spawn writer")
        })
        .collect();
    for mut child in children {
        assert!(
            child.wait().expect("wait writer").success(),
            "every record call succeeded"
        );
    }
    let out = sb.run(&["history", "export", "--format", "json"]);
    assert_eq!(out.code(), 0, "{}", out.stderr);
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out.stdout).expect("json export");
    assert_eq!(rows.len(), 200, "8 writers x 25 records");
}

#[test]
fn repair_backfills_rows_lost_with_the_ledger() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    let mut d = Daemon::start(&sb);
    for name in ["a", "b", "c"] {
        sb.drop_prompt("proj", name, "x\n");
        sb.wait_done("proj", name, secs(15));
    }
    d.sigterm();
    d.wait_exit(secs(5));
    for f in ["ledger.db", "ledger.db-wal", "ledger.db-shm"] {
        let _ = fs::remove_file(sb.root.join(f));
    }
    let out = sb.run(&["history", "repair", "--json"]);
    assert_eq!(out.code(), 0, "{}", out.stderr);
    let report: serde_json::Value = serde_json::from_str(&out.stdout).expect("report");
    assert_eq!(report["inserted"], 3, "{report}");
    let again = sb.run(&["history", "repair", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&again.stdout).expect("report");
    assert_eq!(report["inserted"], 0, "idempotent: {report}");
    assert_eq!(report["checked"], 3);
}

#[test]
fn interrupted_prompt_is_requeued_as_a_new_attempt() {
    let sb = Sandbox::new();
    let script = sb.script(
        "slow-first",
        r#"if [ "$JOBWARDEN_ATTEMPT" = 1 ]; then echo $PPID > "$OUT/monitor.pid"; sleep 30; fi; echo done"#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]).unsandboxed());
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "fragile", "x\n");
    let first = sb.wait_state("proj", "fragile", "running", secs(15));
    let monitor = wait_pid_file(&sb.out().join("monitor.pid"), secs(10));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(monitor),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill monitor");

    let second =
        sb.wait_done_excluding("proj", "fragile", std::slice::from_ref(&first.id), secs(15));
    let first = sb.job(&first.id).expect("first");
    assert_eq!(first.state(), "interrupted", "{:#}", first.record);
    assert_eq!(first.str_field("disposition"), Some("requeued"));
    assert_eq!(second.state(), "succeeded", "{:#}", second.record);
    assert_eq!(second.int_field("attempt"), Some(2));
    assert_eq!(second.str_field("retry_of"), Some(first.id.as_str()));
}

#[test]
fn daemon_start_backfills_rows_its_ledger_lost() {
    let sb = Sandbox::new();
    let script = sb.script("fail", "echo nope >&2; exit 4");
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]).profile("cooldown", "\"1h\""));
    let mut d = Daemon::start(&sb);
    sb.drop_prompt("proj", "lost", "x\n");
    let job = sb.wait_done("proj", "lost", secs(15));
    d.sigterm();
    d.wait_exit(secs(5));
    for f in ["ledger.db", "ledger.db-wal", "ledger.db-shm"] {
        let _ = fs::remove_file(sb.root.join(f));
    }

    let _again = Daemon::start(&sb);
    let out = sb.run(&["history", "show", &job.id, "--json"]);
    assert_eq!(out.code(), 0, "row backfilled at start: {}", out.stderr);
    let row: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(row["outcome"], "failure");
    assert_eq!(row["exit_code"], 4);
    assert_eq!(row["source"], "repair");
    // The backfilled failure still drives the cooldown.
    assert_eq!(sb.run(&["history", "check", "proj", "lost"]).code(), 0);
}

#[test]
fn interrupted_job_leftovers_are_killed_before_its_retry_starts() {
    let sb = Sandbox::new();
    let script = sb.script(
        "orphan-maker",
        r#"if [ "$JOBWARDEN_ATTEMPT" = 1 ]; then sleep 300 & echo $! > "$OUT/orphan.pid"; echo $PPID > "$OUT/monitor.pid"; wait; fi; echo done"#,
    );
    sb.configure(&ConfigToml::new(&["/bin/sh", &script]).unsandboxed());
    let _d = Daemon::start(&sb);
    sb.drop_prompt("proj", "leftovers", "x\n");
    let first = sb.wait_state("proj", "leftovers", "running", secs(15));
    let orphan = wait_pid_file(&sb.out().join("orphan.pid"), secs(10));
    let monitor = wait_pid_file(&sb.out().join("monitor.pid"), secs(10));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(monitor),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill monitor");

    let second = sb.wait_done_excluding(
        "proj",
        "leftovers",
        std::slice::from_ref(&first.id),
        secs(15),
    );
    assert_eq!(second.int_field("attempt"), Some(2), "{:#}", second.record);
    let first = sb.job(&first.id).expect("first");
    assert_eq!(first.state(), "interrupted");
    assert!(second.time_ms("started_at") >= first.time_ms("finished_at"));
    wait_until("the first attempt's orphan to be gone", secs(5), || {
        (!pid_alive(orphan)).then_some(())
    });
}
