//! A start-up that does not grow with history: before its first claims a
//! starting daemon reads only the jobs the index holds unended and the live
//! monitors; the full pass over `runs/` (the start-up check) comes after,
//! off the loop. Held at its fault-injection pause point, the check proves
//! what was found without it and what only it finds.

use std::fs;

use crate::support::*;

/// Appends its name to `$OUT/ran`, then waits for `$OUT/release-<name>` (or
/// `$OUT/release-all`).
const GATED: &str = r#"echo "$1" >> "$OUT/ran"
while [ ! -e "$OUT/release-$1" ] && [ ! -e "$OUT/release-all" ]; do sleep 0.05; done
echo done"#;

/// A daemon whose start-up check holds at its pause point until
/// [`Paused::release`]; returned once it is held there.
fn held(sb: &Sandbox) -> Paused {
    let held = Paused::start(sb, "startup-check", "check-may-go");
    held.wait_reached("the start-up check to be held", secs(10));
    held
}

/// Run `sql` on the sandbox's ledger (an index row lost or stale).
fn ledger_sql(sb: &Sandbox, sql: &str, id: &str) {
    let db = rusqlite::Connection::open(sb.root.join("ledger.db")).expect("open ledger.db");
    let changed = db.execute(sql, [id]).expect("edit the job index");
    assert_eq!(changed, 1, "{sql} for {id}");
}

/// A first daemon runs `names` (gated, so they stay running or queued),
/// then stops, leaving them to their monitors.
fn jobs_left_by_a_stopped_daemon(sb: &Sandbox, names: &[&str]) -> Vec<Job> {
    let mut first = Daemon::start(sb);
    let mut jobs = Vec::new();
    for name in names {
        sb.drop_prompt("proj", name, "x\n");
        jobs.push(sb.wait_job("proj", name, secs(15)));
    }
    first.sigterm();
    assert_eq!(
        first.wait_exit(secs(10)).code(),
        Some(0),
        "{}",
        first.stderr()
    );
    jobs
}

#[test]
fn a_prompt_waiting_at_start_runs_before_the_startup_check_is_done() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    // Some history, then a prompt dropped while no daemon runs.
    let mut first = Daemon::start(&sb);
    sb.drop_prompt("proj", "earlier", "history\n");
    sb.wait_done("proj", "earlier", secs(15));
    first.sigterm();
    first.wait_exit(secs(10));
    sb.drop_prompt("proj", "waiting", "run me now\n");

    let held = held(&sb);
    let job = sb.wait_done("proj", "waiting", secs(15));
    assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    assert_eq!(
        startup_check(&sb).as_deref(),
        Some("running"),
        "the job ran while the check was held"
    );
    let status = sb.run(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&status.stdout).expect("status --json");
    assert_eq!(v["daemon"]["startup_check"], "running", "{}", status.stdout);

    held.release();
    wait_check_done(&sb);
    let status = sb.run(&["status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&status.stdout).expect("status --json");
    assert_eq!(v["daemon"]["startup_check"], "done", "{}", status.stdout);
    assert!(
        held.daemon.stderr().contains("start-up check done"),
        "{}",
        held.daemon.stderr()
    );
}

#[test]
fn a_running_job_whose_index_row_is_missing_is_found_by_the_startup_check() {
    let sb = Sandbox::new();
    let script = sb.script("gated", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]));
    // `kept` keeps the index from being empty (an empty one is rebuilt
    // before the first claim).
    let [lost, _kept] = jobs_left_by_a_stopped_daemon(&sb, &["lost", "kept"])
        .try_into()
        .expect("two jobs");
    let lost = sb.wait_id(&lost.id, "the job to run", secs(15), |j| {
        j.state() == "running"
    });
    // Its monitor dies while no daemon runs, and its index row is lost
    // (as if the claim's index write had failed).
    let monitor = lost.int_field("monitor_pid").expect("monitor_pid") as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(monitor),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("SIGKILL the monitor");
    wait_until("the monitor to be gone", secs(10), || {
        (!pid_alive(monitor)).then_some(())
    });
    ledger_sql(&sb, "DELETE FROM jobs WHERE id = ?1", &lost.id);

    let held = held(&sb);
    // Start-up read the index only: nothing knows the job yet.
    assert_never(
        "the unindexed job to be judged before the check",
        millis(800),
        || sb.job(&lost.id).is_some_and(|j| j.state() != "running"),
    );
    held.release();
    let ended = sb.wait_id(&lost.id, "the job to be interrupted", secs(15), |j| {
        j.is_terminal()
    });
    assert_eq!(ended.state(), "interrupted", "{:#}", ended.record);
    // Requeued by policy, it runs again as attempt 2.
    fs::write(sb.out().join("release-all"), "").expect("release");
    let again = sb.wait_done_excluding("proj", "lost", std::slice::from_ref(&lost.id), secs(15));
    assert_eq!(again.state(), "succeeded", "{:#}", again.record);
    assert_eq!(again.int_field("attempt"), Some(2));
    wait_check_done(&sb);
    let shown = sb.run(&["show", &lost.id, "--json"]);
    assert_eq!(shown.code(), 0, "indexed again: {}", shown.stderr);
}

#[test]
fn a_queued_job_whose_index_row_says_it_ended_still_runs_once() {
    let sb = Sandbox::new();
    let script = sb.script("gated", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]).global("max_jobs", "1"));
    let [first, stale] = jobs_left_by_a_stopped_daemon(&sb, &["first", "stale"])
        .try_into()
        .expect("two jobs");
    assert_eq!(sb.job(&stale.id).expect("stale").state(), "queued");
    ledger_sql(
        &sb,
        "UPDATE jobs SET state = 'succeeded', finished_at = created_at WHERE id = ?1",
        &stale.id,
    );

    let held = held(&sb);
    fs::write(sb.out().join("release-all"), "").expect("release");
    let first = sb.wait_id(&first.id, "the adopted job to end", secs(15), |j| {
        j.is_terminal()
    });
    assert_eq!(first.state(), "succeeded", "{:#}", first.record);
    // The slot is free, but only the check knows the queued job.
    assert_never(
        "the stale job to start before the check",
        millis(800),
        || sb.job(&stale.id).is_some_and(|j| j.state() != "queued"),
    );
    held.release();
    let done = sb.wait_id(&stale.id, "the queued job to run", secs(15), |j| {
        j.is_terminal()
    });
    assert_eq!(done.state(), "succeeded", "{:#}", done.record);
    assert_eq!(sb.ran_lines(), vec!["first", "stale"], "each ran once");
    assert_eq!(sb.jobs().len(), 2, "no job was made twice");
}

#[test]
fn a_daemon_stopped_while_its_startup_check_runs_stops_at_once() {
    let sb = Sandbox::new();
    sb.configure(&ConfigToml::new(&["cat"]));
    let mut held = held(&sb);
    held.daemon.sigterm();
    // The check is held for up to a minute: the daemon does not wait for it.
    let status = held.daemon.wait_exit(secs(5));
    assert_eq!(status.code(), Some(0), "{}", held.daemon.stderr());
}

#[test]
fn jobs_claimed_while_the_startup_check_is_held_are_the_loops_and_run_once() {
    let sb = Sandbox::new();
    let script = sb.script("gated", GATED);
    sb.configure(&ConfigToml::new(&["/bin/sh", &script, "{name}"]).global("max_jobs", "3"));
    let held = held(&sb);
    // A burst claimed before the check lists the claimed prompts: some
    // running (gated), some queued behind them, all this daemon's.
    let names: Vec<String> = (0..6).map(|i| format!("burst{i}")).collect();
    for name in &names {
        sb.drop_prompt("proj", name, "x\n");
    }
    for name in &names {
        sb.wait_job("proj", name, secs(15));
    }
    held.release();
    // They end while the check runs, or before, or after: whichever, the
    // check neither judges them nor puts their prompts back.
    fs::write(sb.out().join("release-all"), "").expect("release");
    for name in &names {
        let job = sb.wait_done("proj", name, secs(30));
        assert_eq!(job.state(), "succeeded", "{:#}", job.record);
    }
    wait_check_done(&sb);
    let ran = sb.ran_lines();
    for name in &names {
        assert_eq!(
            ran.iter().filter(|l| l.as_str() == name).count(),
            1,
            "{name} ran once: {ran:?}"
        );
        assert_eq!(sb.jobs_for("proj", name).len(), 1, "{name} has one job");
    }
    assert!(
        sb.inbox_files()
            .iter()
            .all(|p| !p.to_string_lossy().ends_with(".prompt.md")),
        "nothing put back: {:?}",
        sb.inbox_files()
    );
    let stderr = held.daemon.stderr();
    assert!(!stderr.contains("put back"), "{stderr}");
    assert!(stderr.contains("start-up check done"), "{stderr}");
}
